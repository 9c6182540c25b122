// The coordinator's core: membership, generations and their assignments, the
// rendezvous KV, the job state machine with its event log and progress history,
// failure detection and persistence. No gRPC here: the RPCs arrive through
// CoordinatorHandler, the shards are reached through ShardClient, time comes from
// Clock, and the background work is three plain methods (Tick, PollShards,
// ExpireRendezvousDeadlines) that CoordinatorDriver runs on threads and unit tests
// call directly.
//
// Generations. A generation forms when the active job is PENDING or RENDEZVOUS,
// --ps_shards shards are registered, and at least nodes_min node groups can be
// assigned; it waits the settle window for up to nodes_max. Forming one asks every
// shard for its status (resume step = the lowest step of the shards holding the job,
// 0 for a fresh job), then calls BeginGeneration on every shard, and only then hands
// out the assignments. A worker that times out, fails, leaves, or a shard that
// re-registers ends the generation; so does a worker that would enlarge it (scale-up).
#ifndef TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_
#define TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <deque>
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
#include "services/coordinator/assignment.h"
#include "common/clock.h"
#include "services/coordinator/coordinator_handler.h"
#include "services/coordinator/coordinator_state.pb.h"
#include "services/coordinator/rendezvous_store.h"
#include "services/coordinator/shard_client.h"
#include "services/coordinator/state_file.h"

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
  // Generations in a row ended by worker errors without completing a step before the
  // job fails ("rule B" in EndGenerationLocked, coordinator.cc); 0 = never.
  uint32_t max_generation_failures = 3;
  double straggler_factor = 1.5;         // Step time above factor x median = straggler.
  absl::Duration shard_poll_interval = absl::Seconds(2);
  absl::Duration formation_retry = absl::Seconds(1);  // After a failed formation.
  std::string version;                                // Shown on the dashboard.
  // The size of the stored model file with this SHA-256 (ModelStore::Size), or
  // NOT_FOUND. SubmitJob checks a torchscript job's file with it. Unset: no model
  // files are stored, and torchscript jobs are refused.
  std::function<absl::StatusOr<uint64_t>(const std::string& sha256)> model_size;
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
  // Asks every registered shard for its status (kept for the dashboard) and brings a
  // shard that holds the active job but not yet the current generation up to it.
  // Returns how long to wait before the next poll (short while a shard lags behind).
  absl::Duration PollShards();
  void ExpireRendezvousDeadlines() { rendezvous_.ExpireDeadlines(); }
  RendezvousStore& rendezvous() { return rendezvous_; }

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
  struct WorkerRecord {
    std::string id;
    uint64_t sequence = 0;
    v1::RegisterWorkerRequest registration;
    absl::Time registered;
    absl::Time last_heartbeat;
    v1::HeartbeatRequest report;  // The latest heartbeat.
    uint64_t report_number = 0;   // heartbeats_received_ when it arrived.
    bool reported = false;
    v1::WorkerPhase phase = v1::WORKER_IDLE;
    std::string failed_job;  // Job in which it reported WORKER_FAILED (ineligible).
    std::string note;        // Why it is outside the generation, or its last error.
  };
  struct ShardRecord {
    v1::ShardInfo info;
    std::string version;
    absl::Time registered;
    v1::ShardSummary summary;
    bool polled = false;
    v1::ShardStatus status;  // Last good status.
  };
  struct Generation {
    uint64_t number = 0;
    std::string job_id;
    bool active = false;
    absl::Time formed;
    uint64_t resume_step = 0;
    uint64_t job_step_at_start = 0;
    std::vector<std::string> node_names;                // By node rank.
    std::vector<std::string> rendezvous_ids;            // By node rank.
    std::map<std::string, v1::Assignment> assignments;  // Worker id -> assignment.
    std::set<uint32_t> shards_pending;                  // Shards not yet at this generation.
    std::map<std::string, std::string> failures;        // Worker id -> error it reported.
    std::string end_reason;
    bool ended_by_worker_error = false;
    // While the job is paused: the step boundary every worker pauses at, once all of
    // them reported where they hold (empty = not known yet). Cleared on resume.
    std::optional<uint64_t> pause_at_step;
    // heartbeats_received_ when the pause was asked for: only later reports say where
    // a worker holds for this pause (an earlier WORKER_PAUSED is of a previous one).
    uint64_t pause_asked_after = 0;
  };
  struct FormationAttempt {
    std::string job_id;
    v1::JobSpec spec;
    GenerationPlan plan;
    std::vector<v1::ShardInfo> shards;
    std::map<std::string, uint64_t> worker_sequences;
  };

  // The RPCs whose answer is ready when they return (Handle* calls `done` with it).
  // Sets *deferred when `done` runs after the next Tick (the answer may then carry an
  // assignment); the caller runs `done` with the result otherwise.
  absl::Status RegisterWorker(const v1::RegisterWorkerRequest& request,
                              v1::RegisterWorkerResponse* reply, const ReplyCallback& done,
                              bool* deferred) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Deregister(const v1::DeregisterRequest& request, v1::DeregisterResponse* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                       v1::RegisterParameterServerResponse* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status GetJob(const v1::GetJobRequest& request, v1::Job* reply) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PauseJob(const v1::JobControlRequest& request, v1::Job* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ResumeJob(const v1::JobControlRequest& request, v1::Job* reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status StopJob(const v1::JobControlRequest& request, v1::Job* reply)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Lookups.
  v1::Job* ActiveJobLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets job.waiting_reason when it is the active job and no generation runs.
  void FillWaitingReasonLocked(v1::Job& job) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  v1::Job* FindJobLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Job*> ControlTargetLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<v1::ShardInfo> ShardMapLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Candidate> CandidatesLocked(const v1::Job* job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool InGenerationLocked(const std::string& worker_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Job state machine.
  void TransitionLocked(v1::Job& job, v1::JobState to, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(v1::Job& job, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteJobLocked(v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishJobLocked(v1::Job& job, v1::JobState to, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Generations.
  // Ends the current generation (if any): expires its rendezvous ids and puts a
  // running job back to RENDEZVOUS with `reason` in the event log.
  // `cause` labels the generations_ended counter ("worker_timeout", "worker_failed",
  // "worker_left", "scale_up", "shard_registered").
  void EndGenerationLocked(const std::string& reason, const std::string& cause, bool worker_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an ended generation and expires its rendezvous ids; no job transition.
  void DeactivateGenerationLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorkerLocked(const std::string& worker_id, const std::string& reason,
                          const std::string& cause, bool worker_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides whether a generation should form now; fills waiting_reason_ either way.
  std::optional<FormationAttempt> PlanFormationLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormGenerationIfDue();
  void FormationFailed(const std::string& reason);
  void RecordFailureLocked(const std::string& worker_id, uint64_t generation,
                           const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateProgressLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireSilentWorkersLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pause boundary of the current generation, once every worker holds.
  std::optional<uint64_t> PauseBoundaryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnswerHeartbeatLocked(const WorkerRecord& worker, uint64_t reported_generation,
                             v1::HeartbeatResponse* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Status.
  v1::WorkerInfo WorkerInfoLocked(const WorkerRecord& worker, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::ClusterStatus ClusterStatusLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Persistence.
  void MarkDirtyLocked(bool urgent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveState();  // Writes the newest snapshot when it is not on disk yet.
  void SaveStateIfDue();
  void RequestWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { work_requested_ = true; }

  const CoordinatorOptions options_;
  const Clock* clock_;
  ShardClient* shard_client_;
  std::unique_ptr<StateFile> state_file_;
  RendezvousStore rendezvous_;
  const std::string incarnation_;  // Suffix of worker ids: ids never repeat across restarts.

  mutable absl::Mutex mu_;
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_worker_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint32_t, ShardRecord> shards_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Job> jobs_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  uint64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = 0;
  Generation generation_ ABSL_GUARDED_BY(mu_);
  Generation previous_generation_ ABSL_GUARDED_BY(mu_);
  // Ended generation -> (job id, why), so a worker still acting in one learns why.
  std::map<uint64_t, std::pair<std::string, std::string>> ended_ ABSL_GUARDED_BY(mu_);
  uint32_t failed_generations_in_a_row_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Time> settle_since_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> scale_up_since_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_formation_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string formation_error_ ABSL_GUARDED_BY(mu_);
  uint64_t heartbeats_received_ ABSL_GUARDED_BY(mu_) = 0;
  std::string waiting_reason_ ABSL_GUARDED_BY(mu_) = "no active job: submit one with SubmitJob";
  std::set<std::string> jobs_to_end_ ABSL_GUARDED_BY(mu_);  // EndJob still owed to shards.
  std::vector<std::function<void()>> after_tick_ ABSL_GUARDED_BY(mu_);
  bool work_requested_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t state_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t snapshot_version_ ABSL_GUARDED_BY(mu_) = 0;  // Last version handed to SaveState.
  bool save_urgent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_save_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time next_end_job_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Counters counters_ ABSL_GUARDED_BY(mu_);

  // Taken before mu_: snapshots are written in the order they were taken.
  absl::Mutex save_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t saved_version_ ABSL_GUARDED_BY(save_mu_) = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_H_
