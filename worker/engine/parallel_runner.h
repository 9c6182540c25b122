// Runs the blocks of one matrix product on a few threads: LanePool::RunShared
// (common/lane_pool.h). The calling thread takes part and takes whatever blocks no
// helper has started, and idle helpers sleep: on a loaded machine a product never
// waits for a helper that the scheduler has not run yet, and waiting burns no CPU.
#ifndef TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_
#define TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_

#include <functional>

#include "common/lane_pool.h"

namespace tributary::engine {

class ParallelRunner {
 public:
  // threads >= 1 in all, the caller included: threads - 1 helper lanes.
  explicit ParallelRunner(int threads) : pool_(threads > 1 ? threads - 1 : 0, "matmul") {}

  int threads() const { return pool_.lanes() + 1; }

  // Calls fn(i) once for every i in [0, tasks), on the caller and the helpers, and
  // returns when all calls have returned. Not reentrant; one caller at a time.
  void Run(int tasks, const std::function<void(int)>& fn) { pool_.RunShared(tasks, fn); }

 private:
  LanePool pool_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_PARALLEL_RUNNER_H_
