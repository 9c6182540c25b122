// How a shard turns the nodes' gradient pushes for a partition into new values: one
// implementation per training mode, chosen once when the job is installed.
//
//   SyncAggregator (sync_aggregator.cc), SYNC: values stand at step s. Each node of
//     the generation pushes its gradient sum for step s once; the pushes are summed
//     (widened to float32, straight from the received bytes) as they arrive. When the
//     last node's push arrives one pass divides the sum by the total sample count and
//     applies the optimizer as update number s into the next values buffer; the
//     partition moves to step s + 1 and its new values go to every node's sink. The
//     values of step s (and the optimizer state) are kept so a new generation can
//     roll the partition back one step.
//     LOCAL_SGD is the same with rounds for steps: a round [s, s + k) is pushed at s
//     (k = GradientPush.steps, the same for every node), the nodes' parameter changes
//     are summed and divided like gradients, the outer optimizer applied, and the
//     partition moves to s + k; a rollback goes back one round.
//   AsyncAggregator (async_aggregator.cc), ASYNC: every push is divided by its own
//     sample count and applied at once, as update number `version`; the new values go
//     to the pusher. BOUNDED_STALENESS(k): the same, but a push for step s waits
//     (kHeld) while s is more than k steps ahead of the slowest node of the generation.
//
// Both: buffer partitions take node 0's FLOAT32 values as they are; a non-finite mean
// gradient skips the update (counted); a push is never applied twice ("when is a push
// a duplicate" is each Push's first branch). Every method runs with the partition's
// mu held and the job not changing (the shard's lock held for reading at least).
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/partition_codec.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/shard_job.h"
#include "services/parameter_server/shard_metrics.h"
#include "services/parameter_server/sink_table.h"

namespace tributary::ps {

enum class PushResult {
  kAccepted,   // Summed (SYNC) or applied (ASYNC).
  kDuplicate,  // Already taken; nothing applied. Values re-sent when the step is done.
  kHeld,       // BOUNDED_STALENESS: too far ahead; Retry() says when to push it again.
};

// What the aggregators use of their shard. Not owned.
struct AggregatorContext {
  ShardMetrics* metrics = nullptr;
  SinkTable* sinks = nullptr;
  const Clock* clock = nullptr;
  // A partition moved from one step to another (the shard's step bookkeeping and
  // periodic checkpoints). Called with p.mu held.
  std::function<void(ShardPartition& p, uint64_t from, uint64_t to)> step_moved;
};

class Aggregator {
 public:
  virtual ~Aggregator() = default;

  // Takes one push that the shard validated (job, generation, node, partition, dtype,
  // length, steps). `sink` (may be null) gets the pusher's values where the mode says so.
  virtual absl::StatusOr<PushResult> Push(const ShardJob& job, ShardPartition& p,
                                          const GradientPushView& push, NodeSink* sink) = 0;

  // A new generation resumes at `resume`. Why the partition cannot get there without a
  // checkpoint ("" when it can).
  // `shard` names the shard in the message.
  virtual std::string CannotResume(const ShardPartition& p, uint64_t resume,
                                   uint32_t shard) const = 0;
  // Puts the partition at `resume` for `num_nodes` nodes; counts a one-step rollback
  // and the partial aggregates or held pushes dropped.
  virtual void Resume(ShardPartition& p, uint64_t resume, uint32_t num_nodes, uint32_t* rolled_back,
                      uint32_t* discarded) = 0;

  // Whether the partition waits for `node` (ShardStatus.waiting_for).
  virtual bool WaitingFor(const ShardPartition& p, uint32_t node) const = 0;

  // The values and optimizer state of `step`, with the step to record for them, for a
  // checkpoint; nullopt when the partition has moved past it.
  struct Saved {
    PartitionData data;
    uint64_t step = 0;
  };
  virtual std::optional<Saved> ValuesAt(const ShardPartition& p, uint64_t step) const = 0;
  // The partition's step after restoring `values` whose checkpoint recorded `recorded`.
  virtual uint64_t RestoredStep(const v1::PartitionValues& values, uint64_t recorded) const = 0;
};

// SyncAggregator for SYNC and LOCAL_SGD, AsyncAggregator for the others.
std::unique_ptr<Aggregator> MakeAggregator(v1::TrainingMode mode, AggregatorContext context);

// Counts a refused push under `reason` and returns `status`.
absl::Status CountRejection(ShardMetrics& metrics, RejectReason reason, absl::Status status);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_H_
