// How a batch is cut along dim 0 (Torch's DataParallelTable rule): n samples over
// k parts, every part gets floor(n/k), and the first n%k parts one more. The
// coordinator, the workers and the single-process trainer all use this, so a
// replica's samples follow from its global replica index alone.
#ifndef TRIBUTARY_COMMON_BATCH_SPLIT_H_
#define TRIBUTARY_COMMON_BATCH_SPLIT_H_

#include <cstdint>
#include <vector>

namespace tributary {

struct SampleRange {
  uint64_t offset = 0;
  uint64_t count = 0;

  bool operator==(const SampleRange& other) const {
    return offset == other.offset && count == other.count;
  }
};

// Sizes of the `parts` parts of n samples. parts must be > 0.
std::vector<uint64_t> SplitEvenly(uint64_t n, uint32_t parts);

// Samples of parts [first, first + count) of n samples split over `parts`, as one
// contiguous range. count may be 0 (an empty range at the right offset).
SampleRange PartsRange(uint64_t n, uint32_t parts, uint32_t first, uint32_t count);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_BATCH_SPLIT_H_
