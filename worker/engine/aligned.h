// Buffers whose start is 64-byte aligned. Eigen's vectorized reductions (a row's sum,
// the column sums of a matrix) handle single elements up to the first address aligned
// for the vector width, of the source or, for column sums, of the destination, and
// whole vectors after it: the order of the additions, and so the float result, depends
// on where the buffers start. malloc gives 16-byte alignment, enough for SSE's 16-byte
// vectors but not for AVX's 32: the same cluster job then ended with different
// parameters from run to run (76,284 of 235,146 differed). The CPU executor keeps every
// buffer it reduces over, and every reduction's destination, in one of these
// (distributed_training_test TheSameJobOnTheSameLayoutGivesTheSameBits).
#ifndef TRIBUTARY_WORKER_ENGINE_ALIGNED_H_
#define TRIBUTARY_WORKER_ENGINE_ALIGNED_H_

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace tributary::engine {

inline constexpr size_t kBufferAlignment = 64;  // A cache line; AVX-512's vector width.

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT: rebinding is implicit.
  T* allocate(size_t n) {
    if (n == 0) return nullptr;
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    // aligned_alloc wants a multiple of the alignment.
    const size_t bytes =
        (n * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_ALIGNED_H_
