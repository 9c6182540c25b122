#include "common/lane_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace tributary {
namespace {

TEST(LanePoolTest, OneKeyRunsInOrderOnOneThread) {
  absl::Mutex mu;
  std::map<uint64_t, std::vector<int>> order;
  std::map<uint64_t, std::thread::id> thread_of;
  bool same_thread = true;
  {
    LanePool pool(3);
    for (int i = 0; i < 300; ++i) {
      const uint64_t key = i % 7;
      pool.Submit(key, [&, key, i] {
        absl::MutexLock lock(&mu);
        order[key].push_back(i);
        auto [it, inserted] = thread_of.emplace(key, std::this_thread::get_id());
        if (!inserted && it->second != std::this_thread::get_id()) same_thread = false;
      });
    }
  }  // The destructor runs everything that was submitted.
  EXPECT_TRUE(same_thread);
  ASSERT_EQ(order.size(), 7u);
  for (const auto& [key, indices] : order) {
    ASSERT_EQ(indices.size(), key < 6 ? 43u : 42u);
    for (size_t j = 1; j < indices.size(); ++j) EXPECT_LT(indices[j - 1], indices[j]);
  }
}

TEST(LanePoolTest, DifferentKeysRunInParallel) {
  // Two tasks on different lanes wait for each other: this only finishes when both
  // lanes run at the same time.
  std::atomic<int> arrived{0};
  {
    LanePool pool(2);
    for (uint64_t key : {0, 1}) {
      pool.Submit(key, [&arrived] {
        arrived.fetch_add(1);
        while (arrived.load() < 2) std::this_thread::yield();
      });
    }
  }
  EXPECT_EQ(arrived.load(), 2);
}

TEST(LanePoolTest, WithoutLanesEverythingRunsOnTheCaller) {
  LanePool pool(0);
  const std::thread::id caller = std::this_thread::get_id();
  bool on_caller = true;
  pool.Submit(5, [&] { on_caller = on_caller && std::this_thread::get_id() == caller; });
  pool.RunEach(3, [&](int) { on_caller = on_caller && std::this_thread::get_id() == caller; });
  pool.RunShared(3, [&](int) { on_caller = on_caller && std::this_thread::get_id() == caller; });
  EXPECT_TRUE(on_caller);
}

TEST(LanePoolTest, RunEachKeepsEveryIndexOnItsOwnThread) {
  LanePool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> first(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread::id> seen(4);
    pool.RunEach(4, [&](int i) { seen[i] = std::this_thread::get_id(); });
    if (round == 0) first = seen;
    ASSERT_EQ(seen, first) << "round " << round;
  }
  EXPECT_EQ(first[0], caller);
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
}

TEST(LanePoolTest, RunSharedRunsEveryTaskOnceRunAfterRun) {
  for (int lanes : {0, 1, 3}) {
    LanePool pool(lanes);
    for (int round = 0; round < 200; ++round) {
      const int tasks = 1 + round % 9;
      std::vector<std::atomic<int>> calls(tasks);
      pool.RunShared(tasks, [&](int i) { calls[i].fetch_add(1); });
      for (int i = 0; i < tasks; ++i) ASSERT_EQ(calls[i].load(), 1) << "round " << round;
    }
    pool.RunShared(0, [](int) { FAIL() << "no task to run"; });
  }
}

TEST(LanePoolTest, RunSharedDoesNotWaitForABusyLane) {
  LanePool pool(1);
  absl::Notification release;
  pool.Submit(0, [&] { release.WaitForNotification(); });  // The only lane is busy.
  std::atomic<int> calls{0};
  // The caller does all the work and returns while the lane is still blocked.
  pool.RunShared(8, [&](int) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 8);
  release.Notify();
}

}  // namespace
}  // namespace tributary
