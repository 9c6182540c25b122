// The step pipeline's gate between a step's update and the next step's forward pass.
// The communication thread applies step s's update partition by partition, in
// buffer order (Begin, Applied(until) after each, Finish); the replicas' forward
// passes of step s + 1 wait, layer by layer, only for the parameters they read
// (WaitFor(end)); evaluation, pauses and the end of training wait for the whole
// update (WaitDone). Every wait is woken by the event it waits for, never by polling.
// An update that failed releases every waiter and stays failed: the session cannot
// train on after it.
#ifndef TRIBUTARY_WORKER_UPDATE_GATE_H_
#define TRIBUTARY_WORKER_UPDATE_GATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tributary::worker {

class UpdateGate {
 public:
  // `length`: the parameter buffer's length; the gate starts open (nothing to apply).
  explicit UpdateGate(int64_t length) : applied_until_(length) {}

  // A new update begins: nothing of it is applied.
  void Begin();
  // [0, until) holds the update now.
  void Applied(int64_t until);
  // The update is over: applied, or failed with `status` (the first failure sticks).
  void Finish(const absl::Status& status);
  // Releases every waiter for good (the session is closing).
  void Close();

  // Blocks until [0, end) holds the update, the update is over, or the gate closed.
  // Returns true when it had to wait.
  bool WaitFor(int64_t end);
  // Blocks until the update is over (or the gate closed); its status.
  absl::Status WaitDone();
  // Whether [0, end) is ready without waiting.
  bool Ready(int64_t end) const;
  // OK, or the first failed update's error.
  absl::Status status() const;

 private:
  bool ReadyLocked(int64_t end) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return done_ || closed_ || applied_until_ >= end;
  }

  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t applied_until_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_UPDATE_GATE_H_
