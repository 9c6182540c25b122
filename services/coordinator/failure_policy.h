// When a worker's trouble ends a generation, and when it fails the whole job. Pure
// functions of what the coordinator has seen, so each rule is tested on its own
// (failure_policy_test.cc); Coordinator applies their verdicts.
//
// A generation ends (Coordinator::EndGenerationLocked, with the cause label of the
// generations_ended counter) when:
//   - one of its workers misses heartbeats for --heartbeat_timeout ("worker_timeout";
//     MissedHeartbeats),
//   - one reports WORKER_FAILED ("worker_failed") or gives up a step and waits for a new
//     generation ("worker_step_failed"; both ClassifyReport),
//   - one deregisters or registers again from the same endpoint ("worker_left"),
//   - a worker that would enlarge it has waited the settle window ("scale_up";
//     generation_planner.h),
//   - a PS shard registers again ("shard_registered"), or the job finishes.
// A job fails when:
//   - rule A (SameErrorEverywhere): every worker reports the same error, which is a
//     problem of the job (a dataset missing everywhere), not of one machine;
//   - rule B (FailureStreak): --max_generation_failures generations in a row end by
//     worker errors without completing a step.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_FAILURE_POLICY_H_
#define TRIBUTARY_SERVICES_COORDINATOR_FAILURE_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace tributary::coordinator {

// What a heartbeat says about its worker's trouble.
enum class ReportKind {
  kNormal,     // Nothing to act on.
  kFailed,     // WORKER_FAILED: the worker cannot run this job.
  kLeftStep,   // Waits for a new generation after a failed step or start (error set).
  kRecovered,  // A worker that had failed reports another phase: it may join again.
};
// `in_current_generation`: the worker belongs to the running generation and the report
// is about it. `had_failed`: it reported WORKER_FAILED earlier in this job.
ReportKind ClassifyReport(const v1::HeartbeatRequest& report, bool in_current_generation,
                          bool had_failed);

// True when a worker last heard of at `last_heartbeat` has been silent too long.
bool MissedHeartbeats(absl::Time last_heartbeat, absl::Time now, absl::Duration timeout);

// Rule A. `generation_failures`: worker id -> the error each reported in the generation
// the new report is about (including it), `generation_size` its workers.
// `registered`: for every registered worker, the error with which it failed this job
// (nullopt: it has not failed). Returns the reason to fail the job, or nullopt.
std::optional<std::string> SameErrorEverywhere(
    uint64_t generation, size_t generation_size,
    const std::map<std::string, std::string>& generation_failures,
    const std::vector<std::optional<std::string>>& registered, const std::string& error);

// Rule B: generations in a row ended by worker errors without completing a step.
class FailureStreak {
 public:
  explicit FailureStreak(uint32_t limit) : limit_(limit) {}
  // A generation ended; `progressed`: the job's step moved during it. Returns the
  // reason to fail the job when the streak reached the limit (0 = no limit).
  std::optional<std::string> GenerationEnded(bool worker_error, bool progressed,
                                             const std::string& reason);
  void Reset() { in_a_row_ = 0; }
  uint32_t in_a_row() const { return in_a_row_; }

 private:
  const uint32_t limit_;
  uint32_t in_a_row_ = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_FAILURE_POLICY_H_
