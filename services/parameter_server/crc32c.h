// CRC32C (Castagnoli), the checksum of the PS checkpoint files. Uses the SSE4.2
// instruction when the CPU has it and a table-driven fallback otherwise; both give
// the same value, so files move freely between machines.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_CRC32C_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tributary::ps {

// Extends `crc` (the value of the bytes so far; 0 to start) over data[0, size).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

// The portable table-driven version, for tests that compare both paths.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size);

// Eight lowercase hex digits.
std::string Crc32cHex(uint32_t crc);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_CRC32C_H_
