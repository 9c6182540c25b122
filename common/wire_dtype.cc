#include "common/wire_dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tributary {
namespace {

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline uint16_t Load16(const char* p) {
  uint16_t value;
  std::memcpy(&value, p, 2);
  return value;
}

inline float LoadFloat(const char* p) {
  float value;
  std::memcpy(&value, p, 4);
  return value;
}

// Branch-free binary16 -> binary32 (selects instead of branches so the loops
// vectorize): rebias the exponent; Inf/NaN get the top exponent; subnormals are
// renormalised by a float subtraction.
inline float WidenHalf(uint16_t half) {
  const uint32_t magnitude = static_cast<uint32_t>(half & 0x7fff) << 13;
  const uint32_t exponent = magnitude & 0x0f800000u;
  uint32_t bits = magnitude + (112u << 23);
  bits += exponent == 0x0f800000u ? (112u << 23) : 0;
  const float normal = BitsToFloat(bits);
  const float subnormal = BitsToFloat(bits + (1u << 23)) - BitsToFloat(113u << 23);
  const float unsigned_value = exponent == 0 ? subnormal : normal;
  return BitsToFloat(FloatToBits(unsigned_value) | (static_cast<uint32_t>(half & 0x8000) << 16));
}

inline float WidenBfloat16(uint16_t value) {
  return BitsToFloat(static_cast<uint32_t>(value) << 16);
}

}  // namespace

size_t WireBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return 4;
    case v1::FLOAT16:
    case v1::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

float HalfToFloat(uint16_t half) { return WidenHalf(half); }
float Bfloat16ToFloat(uint16_t value) { return WidenBfloat16(value); }

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // Inf or NaN (keep NaN quiet and non-zero).
    return sign | (magnitude > 0x7f800000u ? 0x7e00 : 0x7c00);
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00;  // Rounds past 65504: Inf.
  if (magnitude < 0x38800000u) {
    // Subnormal or zero in binary16: scale by 2^24 and round the integer, ties to even.
    const float scaled = BitsToFloat(magnitude) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias and round the 13 dropped mantissa bits to nearest even.
  const uint32_t rebased = magnitude - (112u << 23);
  const uint32_t rounded = rebased + 0x0fffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

uint16_t FloatToBfloat16(float value) {
  const uint32_t bits = FloatToBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// The loops below OR a "not finite" flag per element instead of branching, which
// keeps them vectorizable; the flag costs no extra pass over memory.
namespace {
inline uint32_t NotFinite(float value) { return (FloatToBits(value) & 0x7f800000u) == 0x7f800000u; }
}  // namespace

bool WidenInto(v1::DType dtype, const char* src, size_t n, float* __restrict dst) {
  uint32_t bad = 0;
  switch (dtype) {
    case v1::FLOAT32:
      for (size_t i = 0; i < n; ++i) {
        const float value = LoadFloat(src + 4 * i);
        bad |= NotFinite(value);
        dst[i] = value;
      }
      break;
    case v1::FLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const float value = WidenHalf(Load16(src + 2 * i));
        bad |= NotFinite(value);
        dst[i] = value;
      }
      break;
    case v1::BFLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const float value = WidenBfloat16(Load16(src + 2 * i));
        bad |= NotFinite(value);
        dst[i] = value;
      }
      break;
    default:
      break;
  }
  return bad == 0;
}

bool AccumulateInto(v1::DType dtype, const char* src, size_t n, float* __restrict dst) {
  uint32_t bad = 0;
  switch (dtype) {
    case v1::FLOAT32:
      for (size_t i = 0; i < n; ++i) {
        const float value = LoadFloat(src + 4 * i);
        dst[i] += value;
        bad |= NotFinite(value) | NotFinite(dst[i]);
      }
      break;
    case v1::FLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const float value = WidenHalf(Load16(src + 2 * i));
        dst[i] += value;
        bad |= NotFinite(value) | NotFinite(dst[i]);
      }
      break;
    case v1::BFLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const float value = WidenBfloat16(Load16(src + 2 * i));
        dst[i] += value;
        bad |= NotFinite(value) | NotFinite(dst[i]);
      }
      break;
    default:
      break;
  }
  return bad == 0;
}

void NarrowInto(v1::DType dtype, const float* src, size_t n, char* dst) {
  switch (dtype) {
    case v1::FLOAT32:
      std::memcpy(dst, src, n * 4);
      break;
    case v1::FLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t half = FloatToHalf(src[i]);
        std::memcpy(dst + 2 * i, &half, 2);
      }
      break;
    case v1::BFLOAT16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t value = FloatToBfloat16(src[i]);
        std::memcpy(dst + 2 * i, &value, 2);
      }
      break;
    default:
      break;
  }
}

bool AllZero(v1::DType dtype, const char* src, size_t n) {
  const size_t width = WireBytes(dtype);
  for (size_t i = 0; i < n; ++i) {
    const char* element = src + i * width;
    // Little-endian: the sign bit is the top bit of the last byte.
    for (size_t b = 0; b < width; ++b) {
      const unsigned char byte = static_cast<unsigned char>(element[b]);
      if ((b + 1 == width ? (byte & 0x7f) : byte) != 0) return false;
    }
  }
  return true;
}

namespace {

// Calls f(data, count, first) on runs of whole elements of `width` bytes, in order;
// an element split between two pieces is put together in a small buffer first.
// Returns whether every call returned true.
template <typename F>
bool ForEachRun(const ByteSpans& src, size_t width, F&& f) {
  bool all = true;
  size_t index = 0;
  char carry[8];
  size_t carried = 0;
  for (absl::string_view piece : src.pieces) {
    const char* p = piece.data();
    size_t left = piece.size();
    if (carried > 0) {
      const size_t take = std::min(width - carried, left);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      left -= take;
      if (carried < width) continue;
      all &= f(carry, size_t{1}, index);
      ++index;
      carried = 0;
    }
    const size_t whole = left / width;
    if (whole > 0) {
      all &= f(p, whole, index);
      index += whole;
    }
    p += whole * width;
    left -= whole * width;
    if (left > 0) {
      std::memcpy(carry, p, left);
      carried = left;
    }
  }
  return all;
}

}  // namespace

bool WidenInto(v1::DType dtype, const ByteSpans& src, float* dst) {
  return ForEachRun(src, WireBytes(dtype), [&](const char* data, size_t n, size_t first) {
    return WidenInto(dtype, data, n, dst + first);
  });
}

bool AccumulateInto(v1::DType dtype, const ByteSpans& src, float* dst) {
  return ForEachRun(src, WireBytes(dtype), [&](const char* data, size_t n, size_t first) {
    return AccumulateInto(dtype, data, n, dst + first);
  });
}

bool AllZero(v1::DType dtype, const ByteSpans& src) {
  return ForEachRun(src, WireBytes(dtype), [&](const char* data, size_t n, size_t) {
    return AllZero(dtype, data, n);
  });
}

bool CopyFloatsInto(const ByteSpans& src, float* dst) {
  return ForEachRun(src, sizeof(float), [&](const char* data, size_t n, size_t first) {
    return WidenInto(v1::FLOAT32, data, n, dst + first);
  });
}

}  // namespace tributary
