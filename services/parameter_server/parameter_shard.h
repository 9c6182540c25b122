// One parameter-server shard without any transport: the partitions it owns, their
// optimizer state, the aggregation of the nodes' gradient pushes (SYNC, ASYNC,
// BOUNDED_STALENESS), generations, validation and checkpoints. The gRPC service in
// parameter_server_service.h is a thin adaptor over it; the unit tests drive it
// directly.
//
// Semantics, per partition (each completes on its own):
//   SYNC: values stand at step s. Each node of the generation pushes its gradient sum
//     for step s once; the pushes are summed (widened to float32) as they arrive. When
//     the last node's push arrives the sum is divided by the total sample count, the
//     optimizer is applied as update number s, the partition moves to step s + 1 and
//     its new values go to every node's sink. The values of step s (and the optimizer
//     state) are kept so BeginGeneration can roll the partition back one step.
//   ASYNC: every push is divided by its own sample count and applied at once, as
//     update number `version`; the new values go to the pusher.
//   BOUNDED_STALENESS(k): like ASYNC, but a push for step s waits while s is more than
//     k steps ahead of the slowest node of the generation on that partition.
// Buffer partitions (tensor.proto: BatchNorm statistics and other model buffers) take
// node 0's pushed FLOAT32 values as their new values, with no division and no
// optimizer; in SYNC the other nodes' pushes only complete the step.
// A non-finite mean gradient skips the update (values unchanged, step still advances
// in SYNC) and is counted. The shard never applies a push twice: an exact duplicate
// (node, generation, step, partition) is answered OK and the values are re-sent when
// that step is already done.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_

#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/optimizer.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/shard_metrics.h"
#include "services/parameter_server/step_census.h"

namespace tributary::ps {

struct ShardOptions {
  // This shard's index; -1 adopts the index named by the first InitPartitions (or by a
  // restored checkpoint, or by the coordinator through set_shard_index()).
  int shard_index = -1;
  // Checkpoint directory used when the job names none ("" = none).
  std::string checkpoint_dir;
  // Checkpoint files kept per shard directory; older ones are deleted.
  int checkpoints_to_keep = 3;
  // Largest partition (bytes of FLOAT32) this shard accepts in a plan.
  int64_t max_partition_bytes = 4 << 20;
  // Write periodic checkpoints on a background thread (false: inline, for tests).
  bool background_checkpoints = true;
};

// Where one node's parameter updates go: its PushPull stream. The shard calls these
// with its locks held, so implementations must only queue work and return.
class NodeSink {
 public:
  virtual ~NodeSink() = default;
  // New values of a partition for this node.
  virtual void Deliver(std::shared_ptr<const v1::PartitionValues> values) = 0;
  // A push of this sink that Push() answered kHeld may be pushed again now.
  virtual void Retry(uint32_t partition_id) = 0;
  // The shard is done with this sink (a new generation began, the job ended): the
  // stream should end with `status`. No further calls follow for this generation.
  virtual void End(const absl::Status& status) = 0;
};

enum class PushResult {
  kAccepted,   // Summed (SYNC) or applied (ASYNC).
  kDuplicate,  // Already taken; nothing applied. Values re-sent when the step is done.
  kHeld,       // BOUNDED_STALENESS: too far ahead; Retry() says when to push it again.
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

   private:
    friend class ParameterShard;
    explicit InitSession(ParameterShard* shard) : shard_(shard) {}

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
  absl::StatusOr<PushResult> Push(const v1::GradientPush& push, NodeSink* sink);

  // Forgets a sink (its stream ended): no call reaches it after this returns.
  void Detach(NodeSink* sink);

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
  struct Partition;
  struct HeldPush {
    uint32_t node;
    uint64_t step;
    NodeSink* sink;
  };
  struct Job;

  // Outcome of taking the shard-wide locks for a push.
  absl::Status Reject(RejectReason reason, absl::Status status);
  absl::StatusOr<PushResult> PushSync(const Job& job, Partition& p, const v1::GradientPush& push,
                                      NodeSink* sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);
  // Widens, divides and applies one ASYNC/BOUNDED_STALENESS push (p.mu held).
  void ApplyAsyncPush(const Job& job, Partition& p, const v1::GradientPush& push);
  absl::StatusOr<PushResult> PushAsync(const Job& job, Partition& p, const v1::GradientPush& push,
                                       NodeSink* sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);
  void CompleteSyncStep(const Job& job, Partition& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);
  // A buffer for the partition's next values holding a copy of the current ones.
  std::shared_ptr<v1::PartitionValues> NextValues(Partition& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);
  void RegisterSink(uint32_t node, NodeSink* sink);
  void DeliverToAll(const std::shared_ptr<const v1::PartitionValues>& values);
  void DeliverTo(NodeSink* sink, const std::shared_ptr<const v1::PartitionValues>& values);
  void EndAllSinks(const absl::Status& status);
  // Moves a partition from one step to another in the shard-step bookkeeping and
  // triggers periodic checkpoints when the shard's lowest step crosses an interval.
  void MovePartitionStep(uint64_t from, uint64_t to);
  void ResetStepTracking() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ShardStepLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Checkpoints.
  absl::StatusOr<ShardCheckpoint> Snapshot(uint64_t step, bool job_ended)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::CheckpointResponse> WriteSnapshot(const ShardCheckpoint& snapshot,
                                                       const std::string& dir);
  absl::StatusOr<v1::CheckpointResponse> CheckpointLocked(uint64_t step, bool job_ended)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string CheckpointDirLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CheckpointLoop();
  void RequestPeriodicCheckpoint(uint64_t step);
  absl::Status InstallCheckpoint(const std::string& path, ShardCheckpoint checkpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status InstallJob(InitSession& session, v1::InitPartitionsResponse* response);
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
  std::shared_ptr<prometheus::Registry> registry_;
  ShardMetrics metrics_;

  // Shard-wide state: readers are pushes, writers change the job or the generation.
  mutable absl::Mutex mu_;
  std::unique_ptr<Job> job_ ABSL_GUARDED_BY(mu_);
  // The job EndJob ended last: it still answers Pull and GetShardStatus (final
  // parameters stay readable) until another job is installed.
  std::unique_ptr<Job> ended_job_ ABSL_GUARDED_BY(mu_);
  int shard_index_ ABSL_GUARDED_BY(mu_);
  // A BeginGeneration that arrived before the job's InitPartitions (the coordinator
  // may form the generation before the first node installs the job).
  std::optional<v1::BeginGenerationRequest> pending_generation_ ABSL_GUARDED_BY(mu_);

  // Node rank -> its latest sink in the current generation.
  mutable absl::Mutex sinks_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<NodeSink*> sinks_ ABSL_GUARDED_BY(sinks_mu_);

  // How many partitions stand at each step; the first key is the shard's step.
  mutable absl::Mutex steps_mu_ ABSL_ACQUIRED_AFTER(mu_);
  StepCensus partitions_at_step_ ABSL_GUARDED_BY(steps_mu_);
  uint64_t last_reported_step_ ABSL_GUARDED_BY(steps_mu_) = 0;

  // Traffic and outcome counters for ShardStatus (the metrics hold the same).
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<uint64_t> pushes_accepted_{0};
  std::atomic<uint64_t> pushes_duplicate_{0};
  std::atomic<uint64_t> pushes_rejected_{0};
  std::atomic<uint64_t> updates_applied_{0};
  std::atomic<uint64_t> updates_skipped_{0};
  std::atomic<uint64_t> max_staleness_applied_{0};
  std::atomic<uint64_t> aggregation_wait_count_{0};
  std::atomic<uint64_t> aggregation_wait_micros_{0};

  // Checkpoint bookkeeping; checkpoint_mu_ serializes writers and is taken before mu_.
  absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex last_checkpoint_mu_;
  std::string last_checkpoint_path_ ABSL_GUARDED_BY(last_checkpoint_mu_);
  uint64_t last_checkpoint_step_ ABSL_GUARDED_BY(last_checkpoint_mu_) = 0;
  absl::Time last_checkpoint_time_ ABSL_GUARDED_BY(last_checkpoint_mu_) = absl::InfinitePast();
  int64_t last_written_micros_ ABSL_GUARDED_BY(last_checkpoint_mu_) = 0;
  std::string restored_from_ ABSL_GUARDED_BY(last_checkpoint_mu_);

  // Background writer of periodic checkpoints.
  absl::Mutex queue_mu_;
  std::deque<uint64_t> checkpoint_queue_ ABSL_GUARDED_BY(queue_mu_);
  bool checkpoint_busy_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread checkpoint_thread_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SHARD_H_
