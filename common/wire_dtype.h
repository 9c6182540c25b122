// The wire codec both ends share: the element types gradients travel in (FLOAT32,
// FLOAT16, BFLOAT16; little-endian), the loops that narrow float32 into them (worker
// pushes) and widen them back (PS). AccumulateInto is the shard's hot loop: it runs
// over every pushed byte, allocates nothing and vectorizes. The ByteSpans forms read
// a message's bytes where gRPC received them (a list of slices, common/partition_codec.h).
#ifndef TRIBUTARY_COMMON_WIRE_DTYPE_H_
#define TRIBUTARY_COMMON_WIRE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include <vector>

#include "absl/strings/string_view.h"
#include "proto/tensor.pb.h"

namespace tributary {

// Bytes per element; 0 for DTYPE_UNSPECIFIED or an unknown value.
size_t WireBytes(v1::DType dtype);

// The dtype a partition's pushes travel in: the job's wire dtype, except for buffer
// partitions (Partition.buffers: BatchNorm statistics and the like), which always go
// as FLOAT32 so that a running count stays exact.
inline v1::DType PartitionDtype(bool buffers, v1::DType wire_dtype) {
  return buffers ? v1::FLOAT32 : wire_dtype;
}

// dst[i] = float(src[i]) for i < n. src holds n elements of `dtype` (any alignment).
// Returns whether every element was finite (checked in the same pass, so a NaN or
// Inf can be traced to the push that carried it).
bool WidenInto(v1::DType dtype, const char* src, size_t n, float* dst);

// dst[i] += float(src[i]) for i < n. Returns whether every src element and every
// resulting dst element was finite (a sum that overflowed is not).
bool AccumulateInto(v1::DType dtype, const char* src, size_t n, float* dst);

// dst (n elements of `dtype`) = src rounded to nearest, ties to even. For clients.
void NarrowInto(v1::DType dtype, const float* src, size_t n, char* dst);

// True when every element of src (n elements of `dtype`) is +0 or -0.
bool AllZero(v1::DType dtype, const char* src, size_t n);

// Bytes that arrived in pieces (the slices of a received message), in order. Not
// owning: whoever holds the slices keeps them alive. An element may straddle two
// pieces; the loops below handle that.
struct ByteSpans {
  std::vector<absl::string_view> pieces;
  size_t size = 0;

  void Clear() {
    pieces.clear();
    size = 0;
  }
  void Add(absl::string_view piece) {
    if (piece.empty()) return;
    pieces.push_back(piece);
    size += piece.size();
  }
  static ByteSpans Of(absl::string_view whole) {
    ByteSpans spans;
    spans.Add(whole);
    return spans;
  }
};

// The loops above over size / WireBytes(dtype) elements held in pieces. The caller
// checked that size is a multiple of the element width.
bool WidenInto(v1::DType dtype, const ByteSpans& src, float* dst);
// dst[i] += float(src[i]). Returns whether every src element and every resulting
// dst element is finite (so a sum that overflowed counts as non-finite too).
bool AccumulateInto(v1::DType dtype, const ByteSpans& src, float* dst);
bool AllZero(v1::DType dtype, const ByteSpans& src);
// Copies the bytes into dst (src.size bytes) and returns whether dst, read as
// float32, is all finite: for FLOAT32 values received from the PS.
bool CopyFloatsInto(const ByteSpans& src, float* dst);

// Scalar conversions (IEEE binary16 and bfloat16, round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);
float Bfloat16ToFloat(uint16_t value);
uint16_t FloatToBfloat16(float value);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_WIRE_DTYPE_H_
