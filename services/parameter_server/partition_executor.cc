#include "services/parameter_server/partition_executor.h"

#include <utility>

namespace tributary::ps {

PartitionExecutor::PartitionExecutor(int threads) {
  if (threads < 1) threads = 1;
  lanes_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    Lane* lane = lanes_.back().get();
    lane->thread = std::thread([lane] { Run(lane); });
  }
}

PartitionExecutor::~PartitionExecutor() {
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
  }
  for (auto& lane : lanes_) lane->thread.join();
}

void PartitionExecutor::Submit(uint64_t key, std::function<void()> task) {
  Lane& lane = *lanes_[key % lanes_.size()];
  absl::MutexLock lock(&lane.mu);
  lane.tasks.push_back(std::move(task));
}

void PartitionExecutor::Run(Lane* lane) {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&lane->mu);
      lane->mu.Await(absl::Condition(
          +[](Lane* l) ABSL_NO_THREAD_SAFETY_ANALYSIS { return l->stopping || !l->tasks.empty(); },
          lane));
      if (lane->tasks.empty()) return;  // Stopping and drained.
      task = std::move(lane->tasks.front());
      lane->tasks.pop_front();
    }
    task();
  }
}

}  // namespace tributary::ps
