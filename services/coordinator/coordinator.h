// The coordinator's facade: it owns the one lock and orchestrates plain parts that
// each own one concern and know nothing of locks, gRPC or each other:
//   worker_registry.h      who is registered and what each last reported
//   job_book.h             jobs, their state machine, events, progress and result
//   generation_planner.h   when a generation forms and where it resumes
//   generation_formation.h the shard calls that form it (status, restore, fence, begin)
//   failure_policy.h       when trouble ends a generation or fails the job
//   shard_directory.h      which PS shard serves which index, as last polled
//   state_snapshotter.h    what survives a restart, and when it is written
//   cluster_status_view.h  the cluster as the status RPCs and the dashboard show it
//   rendezvous_store.h     the per-generation KV the workers rendezvous through
// No gRPC here: the RPCs arrive through CoordinatorHandler, the shards are reached
// through ShardClient, time comes from Clock, and the background work is three plain
// methods (Tick, PollShards, ExpireRendezvousDeadlines) that CoordinatorDriver runs on
// threads and unit tests call directly.
//
// Forming a generation (FormGenerationIfDue): the planner says when and with whom
// (under the lock), GenerationFormation (generation_formation.h) makes the shard calls
// (outside it: the resume step, a restore, the fence, BeginGeneration on every shard),
// and only then are the assignments handed out (under the lock again).
#ifndef TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_
#define TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "common/clock.h"
#include "services/coordinator/cluster_status_view.h"
#include "services/coordinator/coordinator_handler.h"
#include "services/coordinator/failure_policy.h"
#include "services/coordinator/generation_formation.h"
#include "services/coordinator/generation_planner.h"
#include "services/coordinator/job_book.h"
#include "services/coordinator/job_history.h"
#include "services/coordinator/rendezvous_store.h"
#include "services/coordinator/shard_client.h"
#include "services/coordinator/shard_directory.h"
#include "services/coordinator/state_snapshotter.h"
#include "services/coordinator/worker_registry.h"

namespace tributary::coordinator {

struct CoordinatorOptions {
  uint32_t ps_shards = 1;  // Shards a job needs before its first generation forms.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration settle_window = absl::Seconds(2);
  RendezvousLimits rendezvous;
  std::string state_dir;                                  // Empty = nothing survives a restart.
  absl::Duration state_save_interval = absl::Seconds(5);  // For progress-only changes.
  size_t progress_history = 1000;        // Points kept per job (older ones thinned).
  size_t max_events = 1000;              // Events kept per job (oldest dropped).
  // Per-step history (job_history.h): step points and evaluations kept per job, and
  // points per worker timeline (--history_points, --history_worker_points).
  size_t history_points = 2000;
  size_t history_worker_points = 500;
  // Generations in a row ended by worker errors without completing a step before the
  // job fails (rule B, failure_policy.h); 0 = never.
  uint32_t max_generation_failures = 3;
  double straggler_factor = 1.5;         // Step time above factor x median = straggler.
  absl::Duration shard_poll_interval = absl::Seconds(2);
  absl::Duration formation_retry = absl::Seconds(1);  // After a failed formation.
  // A job whose generations keep failing to form (the shards refuse or cannot be
  // reached) for this long goes FAILED with the last reason; zero = never.
  absl::Duration formation_timeout = absl::Minutes(10);
  std::string version;                                // Shown on the dashboard.
  // The size of the stored model file with this SHA-256 (ModelStore::Size), or
  // NOT_FOUND. SubmitJob checks a torchscript job's file with it. Unset: no model
  // files are stored, and torchscript jobs are refused.
  std::function<absl::StatusOr<uint64_t>(const std::string& sha256)> model_size;
  // The node credential of (job, generation, node rank) put in each assignment, whose
  // SHA-256 every shard gets with BeginGeneration (CredentialIssuer::Node). Unset:
  // assignments carry none.
  std::function<std::string(const std::string& job_id, uint64_t generation, uint32_t node_rank)>
      node_credential;
  // The credential of a worker registration, returned by RegisterWorker
  // (CredentialIssuer::Worker). Unset: none.
  std::function<std::string(const std::string& worker_id)> worker_credential;
};

class Coordinator : public CoordinatorHandler {
 public:
  // `shards` and `clock` are not owned. Loads the state file when options.state_dir is
  // set: call Start() before serving.
  Coordinator(CoordinatorOptions options, const Clock* clock, ShardClient* shards);
  ~Coordinator() override;

  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Loads --state_dir (DATA_LOSS when both state files are unusable) and proves it is
  // writable. A job that was running is put back to RENDEZVOUS: its workers re-register.
  absl::Status Start();

  // --- CoordinatorHandler ---
  void HandleRegisterWorker(const v1::RegisterWorkerRequest& request,
                            v1::RegisterWorkerResponse* reply, ReplyCallback done) override;
  void HandleHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply,
                       ReplyCallback done) override;
  void HandleDeregister(const v1::DeregisterRequest& request, v1::DeregisterResponse* reply,
                        ReplyCallback done) override;
  void HandleRegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                     v1::RegisterParameterServerResponse* reply,
                                     ReplyCallback done) override;
  void HandlePublishRendezvous(const v1::PublishRendezvousRequest& request,
                               v1::PublishRendezvousResponse* reply, ReplyCallback done) override;
  uint64_t HandleWaitRendezvous(const v1::WaitRendezvousRequest& request,
                                v1::WaitRendezvousResponse* reply, ReplyCallback done) override;
  bool CancelWaitRendezvous(uint64_t wait_id) override;
  void HandleSubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply,
                       ReplyCallback done) override;
  void HandleGetJob(const v1::GetJobRequest& request, v1::Job* reply, ReplyCallback done) override;
  void HandleGetJobHistory(const v1::GetJobHistoryRequest& request, v1::JobHistory* reply,
                           ReplyCallback done) override;
  void HandleListJobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* reply,
                      ReplyCallback done) override;
  void HandlePauseJob(const v1::JobControlRequest& request, v1::Job* reply,
                      ReplyCallback done) override;
  void HandleResumeJob(const v1::JobControlRequest& request, v1::Job* reply,
                       ReplyCallback done) override;
  void HandleStopJob(const v1::JobControlRequest& request, v1::Job* reply,
                     ReplyCallback done) override;
  void HandleListWorkers(const v1::ListWorkersRequest& request, v1::ListWorkersResponse* reply,
                         ReplyCallback done) override;
  void HandleGetClusterStatus(const v1::GetClusterStatusRequest& request, v1::ClusterStatus* reply,
                              ReplyCallback done) override;

  // --- Background work ---

  // Expires silent workers, forms a generation when one is due (calling the shards
  // outside the lock), tells shards that a job ended, saves the state when it changed,
  // then answers registrations that waited for this pass.
  void Tick();
  // Asks every registered shard for its status (kept for the dashboard and the job's
  // result) and frees a shard that holds a job this coordinator no longer runs. The
  // driver calls it every --shard_poll_interval.
  void PollShards();
  void ExpireRendezvousDeadlines() { rendezvous_.ExpireDeadlines(); }
  RendezvousStore& rendezvous() { return rendezvous_; }

  // Writes what is not on disk yet (the jobs' histories, the state), for a clean exit.
  void Flush();

  // Blocks (real time) until something asked for a Tick or `max` passed.
  void WaitForWork(absl::Duration max);

  v1::ClusterStatus GetClusterStatus();

  // Totals since start, for /metrics.
  struct Counters {
    uint64_t generations_formed = 0;
    std::map<std::string, uint64_t> generations_ended;  // By cause.
    uint64_t formation_failures = 0;
    uint64_t state_saves = 0;
    uint64_t state_save_errors = 0;
  };
  Counters counters() const;
  const CoordinatorOptions& options() const { return options_; }

 private:
  bool InGenerationLocked(const std::string& worker_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The job that generation `number` belonged to: the running or an ended one (of the
  // last kEndedGenerationsKept); "" when unknown.
  std::string JobOfGenerationLocked(uint64_t number) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The running generation's workers as progress and the result see them.
  std::vector<ReportView> ReportViewsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Job endings: the job book's transition plus what the rest must learn.
  void FinishJobLocked(v1::Job& job, v1::JobState to, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteJobLocked(v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Generations.
  // Ends the current generation (if any): expires its rendezvous ids, puts a running
  // job back to RENDEZVOUS with `reason` in the event log and applies rule B.
  // `cause` labels the generations_ended counter (failure_policy.h lists them).
  void EndGenerationLocked(const std::string& reason, const std::string& cause, bool worker_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an ended generation and expires its rendezvous ids; no job transition.
  void DeactivateGenerationLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorkerLocked(const std::string& worker_id, const std::string& reason,
                          const std::string& cause, bool worker_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the planner; ends a generation for scale-up when it says so. The plan to
  // form, or nullopt.
  std::optional<GenerationPlan> PlanFormationLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The locked plan, GenerationFormation's shard calls outside the lock, then the
  // locked commit.
  void FormGenerationIfDue();
  // Why a generation formed outside the lock may not be handed out (the job ended or
  // changed state, a worker left, a shard registered again); empty when it may.
  std::string ChangedWhileFormingLocked(const std::string& job_id,
                                        const std::vector<v1::ShardInfo>& shards,
                                        const std::map<std::string, uint64_t>& worker_sequences)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the formed generation the running one: rendezvous ids, assignments, the
  // job's step and event.
  void CommitGenerationLocked(const FormedGeneration& formed,
                              const std::vector<v1::ShardInfo>& shards, GenerationPlan plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormationFailed(const std::string& reason);
  // Rule A, after `worker_id` reported WORKER_FAILED with `error` for `generation`.
  void ApplySameErrorRuleLocked(const std::string& worker_id, uint64_t generation,
                                const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateProgressLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files a heartbeat's step and evaluation reports and byte counts in the history of
  // the job whose generation it reports.
  void RecordHistoryLocked(const std::string& worker_id, const v1::HeartbeatRequest& request,
                           absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pause boundary of the current generation, once every worker holds.
  std::optional<uint64_t> PauseBoundaryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnswerHeartbeatLocked(const WorkerRecord& worker, uint64_t reported_generation,
                             v1::HeartbeatResponse* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusInputs StatusInputsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Persistence.
  void MarkDirtyLocked(bool urgent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    snapshotter_.MarkDirty(urgent);
  }
  absl::Status SaveState() ABSL_LOCKS_EXCLUDED(mu_);  // The newest snapshot, unless on disk.
  // Writes the changed histories (when due, or all of them with `now`) and removes the
  // files of jobs no longer kept. Called by the Tick thread only (and Flush).
  void SaveHistories(bool now) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { work_requested_ = true; }

  const CoordinatorOptions options_;
  const Clock* clock_;
  ShardClient* shard_client_;
  RendezvousStore rendezvous_;

  mutable absl::Mutex mu_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  JobBook jobs_ ABSL_GUARDED_BY(mu_);
  HistoryBook histories_ ABSL_GUARDED_BY(mu_);
  ShardDirectory shards_ ABSL_GUARDED_BY(mu_);
  GenerationPlanner planner_ ABSL_GUARDED_BY(mu_);
  FailureStreak failure_streak_ ABSL_GUARDED_BY(mu_);
  StateSnapshotter snapshotter_;  // Its counters are guarded by mu_; Save takes mu_.
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = 0;
  Generation generation_ ABSL_GUARDED_BY(mu_);
  Generation previous_generation_ ABSL_GUARDED_BY(mu_);
  // Ended generation -> (job id, why), so a worker still acting in one learns why.
  std::map<uint64_t, std::pair<std::string, std::string>> ended_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> jobs_to_end_ ABSL_GUARDED_BY(mu_);  // EndJob still owed to shards.
  absl::Time next_end_job_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::function<void()>> after_tick_ ABSL_GUARDED_BY(mu_);
  bool work_requested_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_
