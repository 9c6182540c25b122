// The thresholds take: a block of 8 MiB (mapped on its own by glibc's default
// threshold of 128 KiB) comes from the heap, where a later one reuses it.
#include "common/malloc_thresholds.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tributary {
namespace {

TEST(MallocThresholdsTest, LargeBlocksComeFromTheHeap) {
  ASSERT_TRUE(ReuseLargeBlocks());
#if defined(__GLIBC__)
  constexpr size_t kBytes = 8 << 20;
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  EXPECT_EQ(mallinfo2().hblks, mapped_before) << "the block was mapped on its own";
  std::free(block);
#endif
}

}  // namespace
}  // namespace tributary
