#include "worker/engine/ordered_ready.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tributary::engine {
namespace {

using ::testing::ElementsAre;

TEST(OrderedReadyTest, APieceDoneEarlyWaitsForThoseBeforeIt) {
  std::vector<int> reported;
  OrderedReady ready(4, [&](int position) { reported.push_back(position); });
  ready.Done(2);
  ready.Done(1);
  EXPECT_TRUE(reported.empty()) << "position 0 is not done: nothing after it is final";
  ready.Done(0);
  EXPECT_THAT(reported, ElementsAre(0, 1, 2));
  ready.Done(2);  // Twice, or out of range: nothing more.
  ready.Done(7);
  ready.Done(-1);
  EXPECT_EQ(ready.reported(), 3);
  ready.Done(3);
  EXPECT_THAT(reported, ElementsAre(0, 1, 2, 3));
}

TEST(OrderedReadyTest, ManyThreadsStillReportInOrderOnce) {
  constexpr int kPositions = 64;
  std::vector<int> reported;
  OrderedReady ready(kPositions, [&](int position) { reported.push_back(position); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // Each thread finishes its positions from the back.
      for (int p = kPositions - 1 - t; p >= 0; p -= 4) ready.Done(p);
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(reported.size(), static_cast<size_t>(kPositions));
  for (int p = 0; p < kPositions; ++p) EXPECT_EQ(reported[p], p);
}

}  // namespace
}  // namespace tributary::engine
