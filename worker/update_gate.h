// The step pipeline's gate between a step's update and the next step's forward pass.
// The communication thread applies step s's update partition by partition, in the
// order the updates come back (Begin, Applied(partition) after each, Finish); the
// replicas' forward passes of step s + 1 wait, piece by piece, only for the parameters
// they read (WaitFor(offset, end)), in whatever order they read them; evaluation,
// pauses and the end of training wait for the whole update (WaitDone). Every wait is
// woken by the event it waits for, never by polling. An update that failed releases
// every waiter and stays failed: the session cannot train on after it.
#ifndef TRIBUTARY_WORKER_UPDATE_GATE_H_
#define TRIBUTARY_WORKER_UPDATE_GATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tributary::worker {

class UpdateGate {
 public:
  // `ends`: the partitions' end offsets, strictly increasing (partition i is
  // [ends[i-1], ends[i]), the first from 0). The gate starts open (nothing to apply).
  explicit UpdateGate(std::vector<int64_t> ends);

  // A new update begins: nothing of it is applied.
  void Begin();
  // Partition `index` holds the update now (an index out of range is ignored).
  void Applied(int index);
  // The update is over: applied, or failed with `status` (the first failure sticks).
  void Finish(const absl::Status& status);
  // Releases every waiter for good (the session is closing).
  void Close();

  // Blocks until every partition that holds part of [offset, end) has the update, the
  // update is over, or the gate closed. Returns true when it had to wait.
  bool WaitFor(int64_t offset, int64_t end);
  // Blocks until the update is over (or the gate closed); its status.
  absl::Status WaitDone();
  // Whether [offset, end) is ready without waiting.
  bool Ready(int64_t offset, int64_t end) const;
  // OK, or the first failed update's error.
  absl::Status status() const;

 private:
  bool ReadyLocked(int64_t offset, int64_t end) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::vector<int64_t> ends_;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<char> applied_ ABSL_GUARDED_BY(mu_);  // Per partition, this update.
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_UPDATE_GATE_H_
