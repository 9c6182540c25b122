#include "services/parameter_server/partition_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tributary::ps {
namespace {

TEST(PartitionExecutorTest, OneKeyRunsInOrderOnOneThread) {
  absl::Mutex mu;
  std::map<uint64_t, std::vector<int>> order;
  std::map<uint64_t, std::thread::id> thread_of;
  bool same_thread = true;
  {
    PartitionExecutor executor(3);
    for (int i = 0; i < 300; ++i) {
      const uint64_t key = i % 7;
      executor.Submit(key, [&, key, i] {
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

TEST(PartitionExecutorTest, DifferentKeysRunInParallel) {
  // Two tasks on different lanes wait for each other: this only finishes when both
  // lanes run at the same time.
  std::atomic<int> arrived{0};
  {
    PartitionExecutor executor(2);
    for (uint64_t key : {0, 1}) {
      executor.Submit(key, [&arrived] {
        arrived.fetch_add(1);
        while (arrived.load() < 2) std::this_thread::yield();
      });
    }
  }
  EXPECT_EQ(arrived.load(), 2);
}

}  // namespace
}  // namespace tributary::ps
