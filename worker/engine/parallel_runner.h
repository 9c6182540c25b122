// Runs the blocks of one matrix product on a few threads. The calling thread takes
// part and takes whatever blocks no helper has started, and idle helpers sleep on a
// condition variable rather than spin: on a loaded machine a product never waits for
// a helper that the scheduler has not run yet, and waiting burns no CPU.
#ifndef TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_
#define TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tributary::engine {

class ParallelRunner {
 public:
  // threads >= 1 in all, the caller included: starts threads - 1 helpers.
  explicit ParallelRunner(int threads);
  ~ParallelRunner();
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(i) once for every i in [0, tasks), on the caller and the helpers, and
  // returns when all calls have returned. Not reentrant; one caller at a time.
  void Run(int tasks, const std::function<void(int)>& fn);

 private:
  void HelperLoop();
  void Work();

  std::vector<std::thread> helpers_;
  absl::Mutex mu_;
  absl::CondVar wake_;
  absl::CondVar idle_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;  // Helpers may still join the current job.
  int active_ ABSL_GUARDED_BY(mu_) = 0;     // Helpers inside the current job.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0;
  std::atomic<int> next_{0};
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_
