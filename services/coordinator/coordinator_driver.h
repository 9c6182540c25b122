// Runs the core's background work on threads: the control loop (Tick: timeouts,
// generation forming, EndJob, saving), the shard poller (PollShards) and the
// rendezvous timer (answers overdue waits). Tests of the core call those methods
// directly instead.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_DRIVER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_DRIVER_H_

#include <atomic>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "services/coordinator/coordinator.h"

namespace tributary::coordinator {

class CoordinatorDriver {
 public:
  // `every_second` (may be empty) runs on the control thread about once a second,
  // e.g. to refresh gauges.
  CoordinatorDriver(Coordinator* coordinator, std::function<void()> every_second);
  ~CoordinatorDriver();

  CoordinatorDriver(const CoordinatorDriver&) = delete;
  CoordinatorDriver& operator=(const CoordinatorDriver&) = delete;

  void Start();
  // Joins the threads. Idempotent.
  void Stop();

 private:
  void ControlLoop();
  void ShardLoop();
  void TimerLoop();

  Coordinator* coordinator_;
  std::function<void()> every_second_;
  std::atomic<bool> stopping_{false};
  absl::Notification stop_;
  std::thread control_;
  std::thread shards_;
  std::thread timer_;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_DRIVER_H_
