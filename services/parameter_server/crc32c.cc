#include "services/parameter_server/crc32c.h"

#include <array>
#include <cstring>

#include "absl/strings/str_format.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tributary::ps {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // Castagnoli, bit-reversed.

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      const uint32_t prev = tables[k - 1][b];
      tables[k][b] = (prev >> 8) ^ tables[0][prev & 0xff];
    }
  }
  return tables;
}

constexpr Tables kTables = MakeTables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const uint8_t* p,
                                                          size_t size) {
  uint64_t state = ~crc;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    state = _mm_crc32_u64(state, word);
    p += 8;
    size -= 8;
  }
  uint32_t state32 = static_cast<uint32_t>(state);
  while (size-- > 0) state32 = _mm_crc32_u8(state32, *p++);
  return ~state32;
}

bool HasHardwareCrc() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t state = ~crc;
  while (size >= 8) {
    uint32_t low, high;
    std::memcpy(&low, p, 4);
    std::memcpy(&high, p + 4, 4);
    low ^= state;  // Little-endian: the state folds into the first four bytes.
    state = kTables[7][low & 0xff] ^ kTables[6][(low >> 8) & 0xff] ^
            kTables[5][(low >> 16) & 0xff] ^ kTables[4][low >> 24] ^ kTables[3][high & 0xff] ^
            kTables[2][(high >> 8) & 0xff] ^ kTables[1][(high >> 16) & 0xff] ^
            kTables[0][high >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xff];
  return ~state;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (HasHardwareCrc()) return ExtendHardware(crc, static_cast<const uint8_t*>(data), size);
#endif
  return Crc32cExtendPortable(crc, data, size);
}

std::string Crc32cHex(uint32_t crc) { return absl::StrFormat("%08x", crc); }

}  // namespace tributary::ps
