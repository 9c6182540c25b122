// When a generation forms, and with whom. GenerationPlanner decides, on every pass of
// Coordinator::Tick, whether the active job gets a new generation now: it waits for
// --ps_shards shards, for nodes_min node groups, then the settle window for up to
// nodes_max; a running generation is re-formed (scale-up) once a worker that would
// enlarge it has waited the settle window; a failed formation is retried after
// --formation_retry. It keeps the "waiting for ..." reason the job shows meanwhile.
// Who goes where is PlanGeneration's (assignment.h); where training resumes is
// ResumePoint's, from the shards' statuses. Not thread-safe: Coordinator holds its
// lock around every call and talks to the shards itself.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_GENERATION_PLANNER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_GENERATION_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.pb.h"
#include "services/coordinator/assignment.h"

namespace tributary::coordinator {

// A generation: the workers of one job that train together from a resume step until
// one of them fails or leaves (failure_policy.h lists every cause).
struct Generation {
  uint64_t number = 0;
  std::string job_id;
  bool active = false;
  absl::Time formed;
  uint64_t resume_step = 0;
  std::vector<std::string> node_names;                // By node rank.
  std::vector<std::string> rendezvous_ids;            // By node rank.
  std::map<std::string, v1::Assignment> assignments;  // Worker id -> assignment.
  std::map<std::string, std::string> failures;        // Worker id -> error it reported.
  std::string end_reason;
  bool ended_by_worker_error = false;
  // While the job is paused: the step boundary every worker pauses at, once all of
  // them reported where they hold (empty = not known yet). Cleared on resume.
  std::optional<uint64_t> pause_at_step;
  // WorkerRegistry::reports_received() when the pause was asked for: only later
  // reports say where a worker holds for this pause.
  uint64_t pause_asked_after = 0;
};

struct FormationInputs {
  const v1::Job* job = nullptr;          // The active job, or null.
  std::vector<Candidate> candidates;     // Workers that may join.
  const Generation* running = nullptr;   // The active generation, or null.
  std::vector<uint32_t> missing_shards;  // Shard indices below --ps_shards not registered.
  uint32_t expected_shards = 0;
  // "worker ... failed: ..." for each worker that failed the job (shown while waiting).
  std::vector<std::string> failed_workers;
  uint64_t next_generation = 0;  // For "forming generation N".
};

struct FormationDecision {
  enum class Action {
    kWait,           // Nothing to do now; waiting_reason() says why.
    kEndForScaleUp,  // End the running generation (`reason`), then Decide again.
    kForm,           // Form a generation from `plan`.
  };
  Action action = Action::kWait;
  // PlanGeneration over the candidates; empty without an active job. Its left_out
  // notes are what each idle worker is told.
  GenerationPlan plan;
  std::string reason;
};

class GenerationPlanner {
 public:
  GenerationPlanner(absl::Duration settle_window, absl::Duration formation_retry)
      : settle_window_(settle_window), formation_retry_(formation_retry) {}

  FormationDecision Decide(const FormationInputs& inputs, absl::Time now);

  // A formation failed talking to the shards: the job shows `reason`, and the next
  // attempt waits --formation_retry.
  void FormationFailed(const std::string& reason, absl::Time now);
  // The generation formed, or was abandoned because the world changed meanwhile.
  void Formed();
  void Abandoned() { formation_error_.clear(); }
  // A job was submitted: no retry delay, settle afresh.
  void JobSubmitted();
  // The job ended or resumed: the settle window starts again.
  void RestartSettling();

  const std::string& waiting_reason() const { return waiting_reason_; }
  // How long formations have kept failing (since the first failure after the last
  // generation formed or the job was submitted); zero while none has failed.
  absl::Duration FailingFor(absl::Time now) const {
    return failing_since_.has_value() ? now - *failing_since_ : absl::ZeroDuration();
  }

 private:
  const absl::Duration settle_window_;
  const absl::Duration formation_retry_;
  std::optional<absl::Time> settle_since_;
  std::optional<absl::Time> scale_up_since_;
  absl::Time retry_at_ = absl::InfinitePast();
  std::optional<absl::Time> failing_since_;
  std::string formation_error_;
  std::string waiting_reason_ = "no active job: submit one with SubmitJob";
};

// Where a job's training resumes, from what its shards say.
struct ResumePoint {
  uint64_t step = 0;               // The lowest step of the shards holding the job.
  uint64_t newest_generation = 0;  // The highest generation any shard has seen.
  std::vector<uint32_t> holding;   // Shards holding the job.
  std::vector<uint32_t> empty;     // Shards holding no job.
  // The cut of the plan the holding shards have; unset when none holds the job (or
  // none says: a shard older than the field).
  std::optional<v1::PartitionCut> cut;
};
// `statuses`: every shard of the map, after a shard holding another job was told to
// end it (its job_id then empty). FAILED_PRECONDITION when some shards hold the job at
// a step > 0 and others hold nothing, or when holding shards name different partition
// cuts: training cannot resume consistently.
absl::StatusOr<ResumePoint> ResumePointOf(const std::string& job_id,
                                          const std::vector<v1::ShardStatus>& statuses);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_GENERATION_PLANNER_H_
