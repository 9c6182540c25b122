#include "worker/worker_control.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tributary::worker {

void WorkerControl::Registered(const v1::RegisterWorkerResponse& response) {
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  if (response.has_assignment() && response.assignment().generation() > 0) {
    pending_ = response.assignment();
  }
}

std::string WorkerControl::Answered(const v1::HeartbeatResponse& response,
                                    uint64_t reported_generation) {
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  std::string changed;
  switch (response.action()) {
    case v1::ACTION_RENDEZVOUS:
      if (response.assignment().generation() >
          std::max(current_.generation(), pending_.generation())) {
        changed = absl::StrCat("new assignment: generation ", response.assignment().generation(),
                               response.message().empty() ? "" : " (" + response.message() + ")");
        pending_ = response.assignment();
        job_stopped_ = false;
      }
      paused_ = false;
      pause_at_.reset();
      break;
    case v1::ACTION_PAUSE:
      if (!paused_) changed = absl::StrCat("pausing: ", response.message());
      paused_ = true;
      if (response.has_pause_at_step() && pause_at_ != response.pause_at_step()) {
        absl::StrAppend(&changed, changed.empty() ? "" : "; ", "every worker pauses before step ",
                        response.pause_at_step());
        pause_at_ = response.pause_at_step();
      }
      break;
    case v1::ACTION_CONTINUE:
      if (paused_) changed = "resuming";
      paused_ = false;
      pause_at_.reset();
      break;
    case v1::ACTION_STOP:
      // The answer names the job of the generation the heartbeat reported: by now the
      // worker may have left it for the next job's assignment, which it must not stop.
      if (reported_generation != current_.generation() || NewerPending()) break;
      if (!job_stopped_ && current_.generation() > 0) {
        changed = absl::StrCat("job ended: ", response.message());
      }
      job_stopped_ = true;
      paused_ = false;
      pause_at_.reset();
      break;
    default:
      break;
  }
  return changed;
}

std::string WorkerControl::Interruption(bool shutting_down) const {
  if (shutting_down) return "shutting down";
  if (NewerPending()) return absl::StrCat("new generation ", pending_.generation());
  if (job_stopped_) return "job stopped";
  return "";
}

WorkerControl::AtBoundary WorkerControl::Boundary(uint64_t step, bool independent,
                                                  bool shutting_down) const {
  if (!paused_) return AtBoundary::kGoOn;
  if (!Interruption(shutting_down).empty()) return AtBoundary::kLeave;
  if (independent) return AtBoundary::kHold;
  // Without the common boundary: hold here with the last step's update still on its
  // way (another node may not have pushed that step yet, and will not before the
  // boundary is known).
  if (!pause_at_.has_value()) return AtBoundary::kAwaitBoundary;
  return step < *pause_at_ ? AtBoundary::kGoOn : AtBoundary::kHold;
}

bool WorkerControl::Released(v1::WorkerPhase phase, bool shutting_down) const {
  return !paused_ || (phase == v1::WORKER_PAUSING && pause_at_.has_value()) ||
         !Interruption(shutting_down).empty();
}

WorkerControl::Next WorkerControl::NextWork() const {
  if (NewerPending()) return Next::kRun;
  if (job_stopped_ && current_.generation() > 0) return Next::kJobOver;
  return Next::kWait;
}

void WorkerControl::ForgetJob() {
  current_ = v1::Assignment();
  pending_ = v1::Assignment();
  job_stopped_ = false;
  paused_ = false;
  pause_at_.reset();
}

}  // namespace tributary::worker
