// One parameter-server shard without any transport: it validates requests, holds the
// installed job (shard_job.h) and composes the parts that each own one concern:
//   aggregator.h (sync_aggregator.cc, async_aggregator.cc)
//                       how pushes become new values, per training mode, and when a
//                       push is a duplicate
//   sink_table.h        where new values go (each node's PushPull stream)
//   checkpointer.h      writing checkpoints, the writer thread and the last one's info
//   step_census.h       the shard's step (its lowest partition step) and when a
//                       periodic checkpoint is due
//   shard_metrics.h     every counter (ShardStatus reads them there)
// The gRPC service in parameter_server_service.h is a thin adaptor over it; the unit
// tests drive it directly. InitPartitions (init_session.cc) installs a job at the
// generation its header names; BeginGeneration moves an installed job to a new one.
// Pull, Status, checkpoints and restore are in shard_control.cc.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_

#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/optimizer.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/aggregator.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/checkpointer.h"
#include "services/parameter_server/shard_restorer.h"
#include "services/parameter_server/shard_job.h"
#include "services/parameter_server/shard_metrics.h"
#include "services/parameter_server/sink_table.h"
#include "services/parameter_server/step_census.h"

namespace tributary::ps {

// Periodic checkpoints queued for the writer before pushes wait for it (so every
// multiple of the interval is written, on every shard, whatever the disk's speed).
inline constexpr size_t kMaxCheckpointBacklog = 2;

struct ShardOptions {
  // This shard's index; -1 adopts the index named by the first InitPartitions (or by a
  // restored checkpoint, or by the coordinator through set_shard_index()).
  int shard_index = -1;
  // Checkpoint directory used when the job names none ("" = none).
  std::string checkpoint_dir;
  // Where a job's own checkpoint_dir must lie (relative ones are taken from here; no
  // ".." and no symbolic link out of it); empty = checkpoint_dir. A job naming a
  // directory with neither set is refused.
  std::string checkpoint_root;
  // Checkpoint files kept per shard directory; older ones are deleted.
  int checkpoints_to_keep = 5;
  // On-demand checkpoints (the Checkpoint RPC): one at the step of the last one answers
  // with that one (no new file); a new one sooner than this after the last on-demand
  // one is RESOURCE_EXHAUSTED. Periodic and final checkpoints are not limited.
  absl::Duration min_checkpoint_interval = absl::Seconds(5);
  // Largest partition (bytes of FLOAT32) this shard accepts in a plan.
  int64_t max_partition_bytes = 4 << 20;
  // Time for aggregation waits, optimizer timings and checkpoint ages; null = the real
  // clock. Not owned.
  const Clock* clock = nullptr;
  // Tests: called on the checkpoint writer thread before each periodic checkpoint of
  // `step` is taken (to hold the writer back).
  std::function<void(uint64_t step)> before_periodic_checkpoint;
};

class ParameterShard {
 public:
  // registry may be null (a private one is used).
  ParameterShard(ShardOptions options, std::shared_ptr<prometheus::Registry> registry);
  ~ParameterShard();

  ParameterShard(const ParameterShard&) = delete;
  ParameterShard& operator=(const ParameterShard&) = delete;

  // --- InitPartitions: header, then the initial values of every owned partition. ---
  class InitSession {
   public:
    // Validates the header (job, plan, shard index) against this shard.
    absl::Status Header(const v1::InitHeader& header);
    // One partition's initial values (FLOAT32). Moves the data out of `values`.
    absl::Status Values(v1::PartitionValues& values);
    // Installs the job when all owned partitions arrived, or confirms the installed one.
    absl::StatusOr<v1::InitPartitionsResponse> Finish();
    // Bytes of initial values held (counted in tributary_ps_init_buffered_bytes until
    // the job is installed or the session is destroyed).
    size_t buffered_bytes() const { return buffered_bytes_; }
    ~InitSession();

   private:
    friend class ParameterShard;
    explicit InitSession(ParameterShard* shard) : shard_(shard) {}
    void ReleaseBuffered();

    ParameterShard* shard_;
    bool have_header_ = false;
    bool already_installed_ = false;
    v1::InitHeader header_;
    v1::JobSpec spec_;
    std::optional<Optimizer> optimizer_;
    uint32_t shard_index_ = 0;
    absl::flat_hash_map<uint32_t, size_t> slot_of_;  // Owned partition id -> index.
    std::vector<v1::Partition> owned_;
    std::vector<std::optional<v1::PartitionValues>> values_;
    size_t received_ = 0;
    size_t buffered_bytes_ = 0;
  };
  std::unique_ptr<InitSession> StartInit() {
    return std::unique_ptr<InitSession>(new InitSession(this));
  }

  // Convenience for tests and tools: the whole InitPartitions exchange in one call.
  absl::StatusOr<v1::InitPartitionsResponse> Init(const v1::InitHeader& header,
                                                  std::vector<v1::PartitionValues> values);

  // --- The hot path ---
  // Validates and takes one push. Values produced by it go to sinks (SYNC: every
  // node's latest sink; ASYNC: `sink`). `sink` becomes the node's sink for the
  // current generation (the latest stream of a node wins). sink may be null.
  // Errors: see parameter_server.proto (INVALID_ARGUMENT, FAILED_PRECONDITION) and
  // UNAVAILABLE for a generation this shard has not begun yet.
  // `push.data` is read during the call only.
  absl::StatusOr<PushResult> Push(const GradientPushView& push, NodeSink* sink);
  // The same for a protobuf message (tests, in-process callers).
  absl::StatusOr<PushResult> Push(const v1::GradientPush& push, NodeSink* sink) {
    return Push(ViewOf(push), sink);
  }

  // Forgets a sink (its stream ended): no call reaches it after this returns.
  void Detach(NodeSink* sink);

  // OK when node `node_rank` may push in (job, generation) now: the installed job, its
  // current generation, a rank below its node count. Otherwise the status a push of it
  // would get (FAILED_PRECONDITION no or another job, a stale generation; UNAVAILABLE a
  // generation not begun here yet; INVALID_ARGUMENT a rank outside the generation).
  absl::Status CheckNode(absl::string_view job_id, uint64_t generation, uint32_t node_rank) const;

  // --- Control ---
  // The current values of the installed job (or of the job EndJob ended last); for
  // any other job, the values of its newest checkpoint in this shard's checkpoint
  // directory (the held job's checkpoint_dir, else --checkpoint_dir), so a finished
  // job can be exported after another was installed or the shard restarted.
  absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> Pull(
      const v1::PullRequest& request) const;
  absl::StatusOr<v1::BeginGenerationResponse> BeginGeneration(
      const v1::BeginGenerationRequest& request);
  v1::ShardStatus Status() const;
  absl::StatusOr<v1::CheckpointResponse> Checkpoint();
  absl::StatusOr<v1::EndJobResponse> EndJob(const v1::EndJobRequest& request);
  // Installs a job that resumes an earlier one from this shard's checkpoint of it, or
  // lists the steps it holds (parameter_server.proto, RestoreJob).
  absl::StatusOr<v1::RestoreJobResponse> RestoreJob(const v1::RestoreJobRequest& request);

  // Loads the newest intact checkpoint under options.checkpoint_dir (the shard's own
  // directory, or the only shard directory there when the index is -1). Returns the
  // path loaded, "" when there was nothing to load. Call before serving.
  absl::StatusOr<std::string> RestoreFromCheckpointDirectory();

  // The coordinator's answer to registration. FAILED_PRECONDITION when a job is
  // installed under another index.
  absl::Status set_shard_index(uint32_t index);
  int shard_index() const;

  // Counts parameter bytes sent by Pull (bytes out).
  void RecordPulledBytes(size_t bytes);

  // Refreshes time-dependent gauges (checkpoint age); call periodically.
  void RefreshGauges();

  // Blocks until queued background checkpoints are written (tests, shutdown).
  void FlushCheckpoints();

  ShardMetrics& metrics() { return metrics_; }

 private:
  AggregatorContext Context();
  // Moves a partition from one step to another in the shard-step bookkeeping, keeps
  // its values when `to` is a checkpoint step (ShardPartition::captures) and requests
  // a periodic checkpoint when the shard's lowest step crosses an interval.
  void MovePartitionStep(ShardPartition& p, uint64_t from, uint64_t to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);
  absl::StatusOr<PushResult> PushLocked(const GradientPushView& push, NodeSink* sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckNodeLocked(absl::string_view job_id, uint64_t generation, uint32_t node_rank,
                               RejectReason* reason) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ResetStepTracking() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ShardStepLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes `job` the installed one (the ended job is forgotten).
  void InstallLocked(std::unique_ptr<ShardJob> job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InstallJob(InitSession& session, v1::InitPartitionsResponse* response);
  // Moves the installed job to the generation `request` names.
  absl::StatusOr<v1::BeginGenerationResponse> BeginGenerationLocked(
      const v1::BeginGenerationRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Checkpoints.
  // `captured`: a periodic checkpoint, taken from the partitions' captures of `step`
  // where they have one (and those captures are used up).
  absl::StatusOr<ShardCheckpoint> Snapshot(uint64_t step, bool job_ended,
                                           bool captured = false) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string CheckpointDirLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The directory a job's checkpoints go to: its checkpoint_dir confined to
  // --checkpoint_root, or the shard's --checkpoint_dir ("" = none). PERMISSION_DENIED
  // or INVALID_ARGUMENT naming the path and the root for a directory outside.
  absl::StatusOr<std::string> JobCheckpointDir(const v1::JobSpec& spec) const;
  std::optional<absl::StatusOr<Checkpointer::Pending>> PeriodicSnapshot(uint64_t step);
  // Makes a job read back from a checkpoint the installed one.
  void InstallRestoredLocked(RestoredJob restored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pull of a job this shard no longer holds, from its newest checkpoint under dir;
  // NOT_FOUND when there is none.
  absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> PullFromCheckpoint(
      const v1::PullRequest& request, const std::string& dir, uint32_t shard_index) const;
  // SYNC: replaces every partition's values and optimizer state with this shard's own
  // checkpoint of `step` (the same job and plan); the number of partitions rewound, or
  // NOT_FOUND naming the directory searched.
  absl::StatusOr<uint32_t> RewindToCheckpointLocked(uint64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShardOptions options_;
  const Clock* clock_;
  std::shared_ptr<prometheus::Registry> registry_;
  ShardMetrics metrics_;
  SinkTable sinks_{metrics_};

  // Shard-wide state: readers are pushes, writers change the job or the generation.
  mutable absl::Mutex mu_;
  std::unique_ptr<ShardJob> job_ ABSL_GUARDED_BY(mu_);
  // The job EndJob ended last: it still answers Pull and GetShardStatus (final
  // parameters stay readable) until another job is installed.
  std::unique_ptr<ShardJob> ended_job_ ABSL_GUARDED_BY(mu_);
  int shard_index_ ABSL_GUARDED_BY(mu_);

  // How many partitions stand at each step; the first key is the shard's step.
  mutable absl::Mutex steps_mu_ ABSL_ACQUIRED_AFTER(mu_);
  StepCensus partitions_at_step_ ABSL_GUARDED_BY(steps_mu_);
  uint64_t last_reported_step_ ABSL_GUARDED_BY(steps_mu_) = 0;

  // Reads the checkpoints back (RestoreJob, start-up, rewind).
  const ShardRestorer restorer_{
      [this](v1::TrainingMode mode) { return MakeAggregator(mode, Context()); }};
  // Last: its writer thread calls back into the shard, so it stops first.
  Checkpointer checkpointer_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_
