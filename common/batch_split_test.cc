#include "common/batch_split.h"

#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary {
namespace {

using ::testing::ElementsAre;

TEST(BatchSplitTest, RemainderGoesToTheFirstParts) {
  EXPECT_THAT(SplitEvenly(10, 4), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(SplitEvenly(8, 4), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(SplitEvenly(2, 3), ElementsAre(1, 1, 0));
  EXPECT_THAT(SplitEvenly(0, 2), ElementsAre(0, 0));
}

TEST(BatchSplitTest, RangesTileTheBatchInOrder) {
  for (uint64_t n : {0, 1, 7, 64, 65, 1000}) {
    for (uint32_t parts : {1, 2, 3, 5, 8}) {
      const std::vector<uint64_t> sizes = SplitEvenly(n, parts);
      uint64_t offset = 0;
      for (uint32_t i = 0; i < parts; ++i) {
        EXPECT_EQ(PartsRange(n, parts, i, 1), (SampleRange{offset, sizes[i]}))
            << n << " over " << parts << ", part " << i;
        offset += sizes[i];
      }
      EXPECT_EQ(offset, n);
    }
  }
}

TEST(BatchSplitTest, AWorkersShareSplitAgainEqualsTheGlobalSplit) {
  // 2 workers x 2 replicas of a batch of 10: the worker's share re-split over its own
  // replicas gives exactly the replicas' global ranges.
  const uint64_t n = 10;
  const SampleRange worker1 = PartsRange(n, 4, 2, 2);
  EXPECT_EQ(worker1, (SampleRange{6, 4}));
  const std::vector<uint64_t> inner = SplitEvenly(worker1.count, 2);
  EXPECT_EQ(inner[0], PartsRange(n, 4, 2, 1).count);
  EXPECT_EQ(inner[1], PartsRange(n, 4, 3, 1).count);
}

TEST(BatchSplitTest, EmptyAndOutOfRangeRequests) {
  EXPECT_EQ(PartsRange(10, 4, 1, 0), (SampleRange{3, 0}));
  EXPECT_EQ(PartsRange(10, 4, 3, 5), (SampleRange{8, 2}));
  EXPECT_EQ(PartsRange(10, 0, 0, 1), (SampleRange{0, 0}));
}

}  // namespace
}  // namespace tributary
