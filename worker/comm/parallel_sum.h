// Sums R float buffers into one with a few persistent threads. The worker reduces
// partition by partition while the replicas' threads are still busy with backward,
// so the sum cannot borrow them: it has its own.
#ifndef TRIBUTARY_WORKER_COMM_PARALLEL_SUM_H_
#define TRIBUTARY_WORKER_COMM_PARALLEL_SUM_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tributary::worker {

class ParallelSum {
 public:
  // threads >= 1 (the calling thread counts as one).
  explicit ParallelSum(int threads);
  ~ParallelSum();
  ParallelSum(const ParallelSum&) = delete;
  ParallelSum& operator=(const ParallelSum&) = delete;

  // out[i] = sources[0][i] + sources[1][i] + ... for i in [0, length), adding in source
  // order (so the result does not depend on the number of threads).
  void Sum(const std::vector<const float*>& sources, int64_t length, float* out);

 private:
  void Loop(int index);
  void SumSlice(int part);

  const int parts_;
  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The current task, valid while pending_ > 0.
  const std::vector<const float*>* sources_ = nullptr;
  int64_t length_ = 0;
  float* out_ = nullptr;
  std::vector<std::thread> threads_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_PARALLEL_SUM_H_
