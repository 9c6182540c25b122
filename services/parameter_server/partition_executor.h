// A fixed pool of threads where every task carries a key (a partition id) and all
// tasks of one key run on the same thread, in the order they were submitted. The
// shard sums each partition's pushes on "its" thread, so the partition's
// accumulator stays in that core's cache, pushes of one partition never contend,
// and different partitions are summed in parallel.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tributary::ps {

class PartitionExecutor {
 public:
  // threads must be >= 1.
  explicit PartitionExecutor(int threads);
  // Runs every task already submitted, then joins the threads.
  ~PartitionExecutor();

  PartitionExecutor(const PartitionExecutor&) = delete;
  PartitionExecutor& operator=(const PartitionExecutor&) = delete;

  // Queues task on thread key % threads(). Must not be called after destruction began.
  void Submit(uint64_t key, std::function<void()> task);

  int threads() const { return static_cast<int>(lanes_.size()); }

 private:
  struct Lane {
    absl::Mutex mu;
    std::deque<std::function<void()>> tasks ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };

  static void Run(Lane* lane);

  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
