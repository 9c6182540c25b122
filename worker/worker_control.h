// What a worker does next, decided from the coordinator's answers and its own
// progress: go on, leave the generation (and why), hold at a step boundary while the
// job is paused (and until when), run the next assignment, forget the job, and when
// the next heartbeat is due. Pure: no locks, no threads, no gRPC, time from a Clock.
// WorkerRuntime holds its mutex around it and does what it says; the pause protocol
// is the one of proto/coordinator.proto (HeartbeatResponse.pause_at_step).
#ifndef TRIBUTARY_WORKER_WORKER_CONTROL_H_
#define TRIBUTARY_WORKER_WORKER_CONTROL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/coordinator.pb.h"

namespace tributary::worker {

class WorkerControl {
 public:
  // `clock` is not owned.
  explicit WorkerControl(const Clock* clock) : clock_(clock) {}

  // --- The coordinator's answers ---
  // Registration (again): its heartbeat interval and the assignment it may carry.
  void Registered(const v1::RegisterWorkerResponse& response);
  // The answer to a heartbeat that reported `reported_generation`. What changed, for
  // the log ("" when nothing did).
  std::string Answered(const v1::HeartbeatResponse& response, uint64_t reported_generation);

  // --- Inside a generation ---
  // Why the step about to run (or the wait in progress) should be left: "shutting
  // down", "new generation N", "job stopped"; "" to go on.
  std::string Interruption(bool shutting_down) const;
  // What to do at the boundary before `step` (independent: ASYNC, whose nodes never
  // wait for each other's pushes, pause each where it is).
  enum class AtBoundary {
    kGoOn,           // Not paused (or paused, but the common boundary is still ahead).
    kLeave,          // Interruption() says why.
    kAwaitBoundary,  // Hold as WORKER_PAUSING until the coordinator names the boundary.
    kHold,           // Apply the last update, then hold as WORKER_PAUSED.
  };
  AtBoundary Boundary(uint64_t step, bool independent, bool shutting_down) const;
  // Whether a worker holding as `phase` may go on (or has to leave).
  bool Released(v1::WorkerPhase phase, bool shutting_down) const;

  // --- Between generations ---
  enum class Next {
    kWait,     // Nothing to do until the next answer.
    kRun,      // pending(): a newer assignment.
    kJobOver,  // ACTION_STOP for the current job: forget it (or leave, --exit_after_job).
  };
  Next NextWork() const;
  // Now running `assignment` (pending() when NextWork said kRun).
  void Began(const v1::Assignment& assignment) { current_ = assignment; }
  // The current job is over: no assignment, no pause, no stop.
  void ForgetJob();

  // --- Heartbeats ---
  void HeartbeatSent() { last_heartbeat_ = clock_->Now(); }
  absl::Time NextHeartbeat() const { return last_heartbeat_ + heartbeat_interval_; }
  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }

  const v1::Assignment& current() const { return current_; }
  const v1::Assignment& pending() const { return pending_; }
  bool paused() const { return paused_; }
  std::optional<uint64_t> pause_at() const { return pause_at_; }
  bool job_stopped() const { return job_stopped_; }
  const Clock& clock() const { return *clock_; }

 private:
  bool NewerPending() const { return pending_.generation() > current_.generation(); }

  const Clock* clock_;
  v1::Assignment current_;  // The generation being run (or last run).
  v1::Assignment pending_;  // The newest assignment not yet taken.
  bool paused_ = false;
  std::optional<uint64_t> pause_at_;  // The boundary every worker pauses at, once named.
  bool job_stopped_ = false;          // ACTION_STOP for the current job.
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  absl::Time last_heartbeat_ = absl::InfinitePast();
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_CONTROL_H_
