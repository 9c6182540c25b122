// The job a PS shard holds: its spec, plan, optimizer, generation and the partitions
// it owns with their values, optimizer state and aggregation state. BuildShardJob is
// the one place a job is put together, from a worker's InitPartitions or from a
// checkpoint. Plain data: ParameterShard's locks guard it (ShardPartition::mu each
// partition's fields).
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_JOB_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_JOB_H_

#include <prometheus/histogram.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/optimizer.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/checkpoint_file.h"

namespace tributary::ps {

class Aggregator;
class NodeSink;

// The most nodes a generation may have (BeginGeneration, InitHeader.num_nodes): every
// partition keeps a few bytes per node.
inline constexpr uint32_t kMaxNodes = 65536;
// The most samples one push may count (2^40): with at most kMaxNodes pushes per step,
// a partition's sample sum stays below 2^56 and cannot wrap.
inline constexpr uint64_t kMaxSamplesPerPush = uint64_t{1} << 40;

// BOUNDED_STALENESS: a push that waits for the slowest node.
struct HeldPush {
  uint32_t node;
  uint64_t step;
  NodeSink* sink;
};

// One owned partition. Every mutable field is guarded by mu; pushes of one partition
// are serialized by it (and in the service by running on one executor thread).
struct ShardPartition {
  ShardPartition(const v1::Partition& spec, uint32_t num_nodes);

  // Keeps a retired values buffer for reuse (the pool never grows past its capacity,
  // so keeping one never allocates).
  void Retire(std::shared_ptr<v1::PartitionValues> old) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Forgets every node's pushes: a new generation of `num_nodes` nodes.
  void ResetNodes(uint32_t num_nodes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A buffer for the next values, of the partition's length, its contents undefined
  // (reused from the spares when no stream holds one any more); version and step are
  // the current values'.
  std::shared_ptr<v1::PartitionValues> FreshValues() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  absl::Mutex mu;
  const uint32_t id;
  const int64_t offset;
  const size_t length;
  // Model buffers (BatchNorm statistics): node 0's pushed values become the new
  // values as they are, in FLOAT32; no division, no optimizer (tensor.proto).
  const bool buffers;

  // Current values (FLOAT32; their step and version inside). Shared, never modified
  // once published: streams may still be sending them.
  std::shared_ptr<v1::PartitionValues> values ABSL_GUARDED_BY(mu);
  // SYNC: the values of the previous step (LOCAL_SGD: round), kept for a rollback (or
  // null).
  std::shared_ptr<v1::PartitionValues> prev_values ABSL_GUARDED_BY(mu);
  // Retired values buffers, reused for the next update once no stream holds them:
  // with one per node in flight the push path allocates nothing in steady state.
  std::vector<std::shared_ptr<v1::PartitionValues>> spares ABSL_GUARDED_BY(mu);
  std::vector<float> state ABSL_GUARDED_BY(mu);       // Optimizer state, slot by slot.
  std::vector<float> prev_state ABSL_GUARDED_BY(mu);  // SYNC: state before the last step.

  // SYNC: the step the values are for; ASYNC: the slowest node's next step.
  uint64_t step ABSL_GUARDED_BY(mu) = 0;
  // Step at which the current generation began: older steps are stale.
  uint64_t generation_start_step ABSL_GUARDED_BY(mu) = 0;

  // SYNC: how long its steps waited from the first push to the last (this partition's
  // series of tributary_ps_aggregation_wait_seconds, found on first use).
  prometheus::Histogram* aggregation_wait ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t aggregation_waits ABSL_GUARDED_BY(mu) = 0;
  double aggregation_wait_seconds ABSL_GUARDED_BY(mu) = 0;
  // SYNC and LOCAL_SGD: the step's pushes' arrivals so far, in seconds after its first
  // (their sum), and the partition's series of tributary_ps_slowest_wait_seconds_total.
  double arrivals_after_first ABSL_GUARDED_BY(mu) = 0;
  double last_arrival_after_first ABSL_GUARDED_BY(mu) = 0;
  prometheus::Counter* slowest_wait ABSL_GUARDED_BY(mu) = nullptr;

  // SYNC aggregation of `step` (ASYNC uses `sum` as scratch for the gradient).
  std::vector<float> sum ABSL_GUARDED_BY(mu);
  // LOCAL_SGD: the steps the round being aggregated covers (the first push's).
  uint32_t round_steps ABSL_GUARDED_BY(mu) = 0;
  std::vector<uint8_t> pushed ABSL_GUARDED_BY(mu);
  uint32_t pushed_count ABSL_GUARDED_BY(mu) = 0;
  uint64_t samples ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_push ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> non_finite_nodes ABSL_GUARDED_BY(mu);

  // ASYNC / BOUNDED_STALENESS: each node's last applied step on this partition.
  std::vector<uint8_t> has_pushed ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> last_step ABSL_GUARDED_BY(mu);
  std::vector<HeldPush> held ABSL_GUARDED_BY(mu);
  // ASYNC / BOUNDED_STALENESS: how far ahead of the slowest node an applied push ran.
  uint64_t max_staleness_applied ABSL_GUARDED_BY(mu) = 0;

  uint64_t skipped_non_finite ABSL_GUARDED_BY(mu) = 0;

  // Periodic checkpoints: the values and optimizer state of each multiple of the job's
  // checkpoint interval this partition reached, taken at that moment and held until
  // the writer thread writes them. So every shard writes the same steps however far
  // its writer lags, and a restarted shard's newest checkpoint is a step the other
  // shards can rewind to. At most kMaxCaptures (the push path waits for the writer
  // before more pile up: ParameterShard::Push).
  struct Capture {
    uint64_t step = 0;  // The step to record (SYNC: the values' step).
    PartitionData data;
  };
  static constexpr size_t kMaxCaptures = 4;
  std::deque<Capture> captures ABSL_GUARDED_BY(mu);
};

struct ShardJob {
  explicit ShardJob(Optimizer optimizer);
  ~ShardJob();

  std::string job_id;
  v1::JobSpec spec;
  v1::PartitionPlan plan;
  uint64_t total_steps = 0;
  Optimizer optimizer;
  uint32_t shard_index = 0;
  uint64_t generation = 0;
  // `generation` was begun by a fence (BeginGenerationRequest.fence): no node pushes in
  // it, and the coordinator's BeginGeneration of that same generation follows.
  bool fenced = false;
  uint32_t num_nodes = 1;
  // Periodic checkpoints are written (an interval and a directory): partitions keep
  // ShardPartition::captures.
  bool periodic_checkpoints = false;
  v1::TrainingMode mode = v1::SYNC;
  uint32_t staleness = 0;
  v1::DType wire_dtype = v1::FLOAT32;
  std::vector<std::unique_ptr<ShardPartition>> partitions;  // Ascending id.
  absl::flat_hash_map<uint32_t, ShardPartition*> by_id;
  std::unique_ptr<Aggregator> aggregator;  // Of `mode`.
};

// What a job is built from.
struct JobSource {
  std::string job_id;
  v1::JobSpec spec;  // Defaults applied, validated.
  v1::PartitionPlan plan;
  uint64_t total_steps = 0;
  uint32_t shard_index = 0;
  uint64_t generation = 0;
  uint32_t num_nodes = 1;
  struct Seed {
    v1::Partition partition;                      // From the plan; owned by shard_index.
    std::shared_ptr<v1::PartitionValues> values;  // FLOAT32, partition.length floats.
    std::vector<float> state;                     // Empty: zeros (a fresh job).
    uint64_t step = 0;
    uint64_t skipped_non_finite = 0;
  };
  std::vector<Seed> partitions;  // Ascending id.
};
// `aggregator` is the mode's (MakeAggregator). Fails only when a seed's optimizer
// state does not have the optimizer's size.
absl::StatusOr<std::unique_ptr<ShardJob>> BuildShardJob(JobSource source, Optimizer optimizer,
                                                        std::unique_ptr<Aggregator> aggregator);

// "plan <fingerprint>", for messages.
std::string PlanName(const v1::PartitionPlan& plan);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_JOB_H_
