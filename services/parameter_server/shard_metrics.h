// The shard's Prometheus metrics (rendered at /metrics by the ServiceHost):
//   tributary_ps_pushes_total{result="accepted"|"duplicate"|"held"}
//   tributary_ps_pushes_rejected_total{reason=...}     (see RejectReason)
//   tributary_ps_bytes_total{direction="in"|"out"}     (gradient / parameter payload bytes)
//   tributary_ps_updates_total{result="applied"|"skipped_non_finite"}
//   tributary_ps_aggregation_wait_seconds{partition}   (histogram per partition, first to
//                                                       last push of a partition-step, SYNC)
//   tributary_ps_slowest_wait_seconds_total{partition} (counter per partition: each node's
//                                                       push's wait for the step's last)
//   tributary_ps_optimizer_apply_seconds               (histogram, one partition update)
//   tributary_ps_step, tributary_ps_generation, tributary_ps_partitions (gauges)
//   tributary_ps_checkpoints_total{result="ok"|"error"}
//   tributary_ps_checkpoint_age_seconds (gauge, -1 before the first checkpoint),
//   tributary_ps_last_checkpoint_timestamp_seconds (gauge, Unix time)
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_METRICS_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>

namespace tributary::ps {

// Why a push was refused; each has its own counter label.
enum class RejectReason {
  kNoJob,             // FAILED_PRECONDITION: nothing installed.
  kWrongJob,          // FAILED_PRECONDITION: another job id.
  kStaleGeneration,   // FAILED_PRECONDITION.
  kFutureGeneration,  // UNAVAILABLE: BeginGeneration has not reached this shard yet.
  kBadNodeRank,       // INVALID_ARGUMENT.
  kUnknownPartition,  // INVALID_ARGUMENT: not in the plan or owned by another shard.
  kWrongDtype,        // INVALID_ARGUMENT.
  kWrongLength,       // INVALID_ARGUMENT.
  kZeroSamples,       // INVALID_ARGUMENT.
  kTooManySamples,    // INVALID_ARGUMENT: sample_count above kMaxSamplesPerPush.
  kStaleStep,         // FAILED_PRECONDITION.
  kStepAhead,         // FAILED_PRECONDITION: SYNC step not begun yet.
  kWrongSteps,        // INVALID_ARGUMENT: GradientPush.steps outside the mode's round.
  kCount,
};

const char* RejectReasonName(RejectReason reason);

// The only place a shard counts: ShardStatus reads its totals here too.
struct ShardMetrics {
  explicit ShardMetrics(prometheus::Registry& registry);

  prometheus::Counter& pushes_accepted;
  prometheus::Counter& pushes_duplicate;
  prometheus::Counter& pushes_held;
  std::array<prometheus::Counter*, static_cast<size_t>(RejectReason::kCount)> rejected;
  prometheus::Counter& bytes_in;
  prometheus::Counter& bytes_out;
  prometheus::Counter& updates_applied;
  prometheus::Counter& updates_skipped_non_finite;
  prometheus::Family<prometheus::Histogram>& aggregation_wait_seconds;
  prometheus::Family<prometheus::Counter>& slowest_wait_seconds;
  prometheus::Histogram& optimizer_apply_seconds;
  prometheus::Gauge& step;
  prometheus::Gauge& generation;
  prometheus::Gauge& partitions;
  prometheus::Counter& checkpoints_ok;
  prometheus::Counter& checkpoints_error;
  prometheus::Counter& checkpoint_backlog_waits;
  prometheus::Gauge& init_buffered_bytes;
  prometheus::Gauge& checkpoint_age_seconds;
  prometheus::Gauge& last_checkpoint_timestamp_seconds;

  // The aggregation-wait series of one partition (created on first use; a partition id
  // keeps its series across jobs).
  prometheus::Histogram& AggregationWait(uint32_t partition);
  // The same for the wait of the nodes' pushes for each step's last push.
  prometheus::Counter& SlowestWait(uint32_t partition);

  prometheus::Counter& Rejected(RejectReason reason) {
    return *rejected[static_cast<size_t>(reason)];
  }
  // Pushes refused for any reason, since start.
  uint64_t RejectedTotal() const;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_METRICS_H_
