// The one thread pool: a fixed set of threads ("lanes"), each with its own queue.
// Three ways to use it, for the three kinds of parallel work in Tributary:
//   Submit(key, task)   keyed: every task of a key runs on the same lane, in the order
//                       submitted (the PS sums each partition on "its" thread, so the
//                       partition's accumulator stays in one core's cache);
//   RunEach(n, fn)      fork-join with fixed places: fn(0) on the caller, fn(i) always
//                       on lane i - 1 (a replica always runs on the same thread, which
//                       keeps a GPU replica's device current there);
//   RunShared(n, fn)    work sharing: the caller and whichever lanes get there first
//                       split fn(0..n-1); a lane the scheduler has not run yet by the
//                       time the work is gone takes no part, so on a loaded machine a
//                       matrix product never waits for a sleeping helper.
// Idle lanes sleep on their queue; nothing spins.
#ifndef TRIBUTARY_COMMON_LANE_POOL_H_
#define TRIBUTARY_COMMON_LANE_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tributary {

class LanePool {
 public:
  // What the lanes run: compute (matrix products, replicas), or hand-offs on a step's
  // critical path that wake, work briefly and sleep (the PS's summation lanes), which
  // ask for the process's short scheduler slice (common/thread_slice.h).
  enum class Work { kCompute, kHandoff };

  // `lanes` >= 0 threads (0: every method runs its work on the caller), named
  // "<name>-<index>" (common/thread_name.h).
  explicit LanePool(int lanes, absl::string_view name = "lane", Work work = Work::kCompute);
  // Runs every task already submitted, then joins the lanes.
  ~LanePool();
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  int lanes() const { return static_cast<int>(lanes_.size()); }

  // Queues `task` on lane key % lanes(). Not after destruction began.
  void Submit(uint64_t key, std::function<void()> task);

  // Calls fn(i) for every i in [0, n): fn(0) on the caller, fn(i) on lane
  // (i - 1) % lanes(). Returns when every call returned.
  void RunEach(int n, const std::function<void(int)>& fn);

  // Calls fn(i) once for every i in [0, n), on the caller and the lanes that join in
  // time; returns when every call returned. Not reentrant per pool.
  void RunShared(int n, const std::function<void(int)>& fn);

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

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_LANE_POOL_H_
