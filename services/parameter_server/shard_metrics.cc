#include "services/parameter_server/shard_metrics.h"

#include <string>

namespace tributary::ps {
namespace {

prometheus::Family<prometheus::Counter>& PushFamily(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("tributary_ps_pushes_total")
      .Help("Gradient pushes taken by this shard, by result.")
      .Register(registry);
}

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};
}

}  // namespace

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNoJob:
      return "no_job";
    case RejectReason::kWrongJob:
      return "wrong_job";
    case RejectReason::kStaleGeneration:
      return "stale_generation";
    case RejectReason::kFutureGeneration:
      return "future_generation";
    case RejectReason::kBadNodeRank:
      return "bad_node_rank";
    case RejectReason::kUnknownPartition:
      return "unknown_partition";
    case RejectReason::kWrongDtype:
      return "wrong_dtype";
    case RejectReason::kWrongLength:
      return "wrong_length";
    case RejectReason::kZeroSamples:
      return "zero_samples";
    case RejectReason::kTooManySamples:
      return "too_many_samples";
    case RejectReason::kStaleStep:
      return "stale_step";
    case RejectReason::kStepAhead:
      return "step_ahead";
    case RejectReason::kWrongSteps:
      return "wrong_steps";
    case RejectReason::kCount:
      break;
  }
  return "unknown";
}

ShardMetrics::ShardMetrics(prometheus::Registry& registry)
    : pushes_accepted(PushFamily(registry).Add({{"result", "accepted"}})),
      pushes_duplicate(PushFamily(registry).Add({{"result", "duplicate"}})),
      pushes_held(PushFamily(registry).Add({{"result", "held"}})),
      rejected{},
      bytes_in(prometheus::BuildCounter()
                   .Name("tributary_ps_bytes_total")
                   .Help("Payload bytes: gradients in, parameters out.")
                   .Register(registry)
                   .Add({{"direction", "in"}})),
      bytes_out(prometheus::BuildCounter()
                    .Name("tributary_ps_bytes_total")
                    .Help("Payload bytes: gradients in, parameters out.")
                    .Register(registry)
                    .Add({{"direction", "out"}})),
      updates_applied(prometheus::BuildCounter()
                          .Name("tributary_ps_updates_total")
                          .Help("Partition updates, by result.")
                          .Register(registry)
                          .Add({{"result", "applied"}})),
      updates_skipped_non_finite(prometheus::BuildCounter()
                                     .Name("tributary_ps_updates_total")
                                     .Help("Partition updates, by result.")
                                     .Register(registry)
                                     .Add({{"result", "skipped_non_finite"}})),
      aggregation_wait_seconds(
          prometheus::BuildHistogram()
              .Name("tributary_ps_aggregation_wait_seconds")
              .Help("SYNC: seconds from a partition-step's first push to its last, per "
                    "partition.")
              .Register(registry)),
      slowest_wait_seconds(
          prometheus::BuildCounter()
              .Name("tributary_ps_slowest_wait_seconds_total")
              .Help("SYNC and LOCAL_SGD: seconds the nodes' pushes of a partition waited for "
                    "each step's (round's) last push, summed over the nodes (a push that "
                    "arrived d seconds before the last adds d), per partition.")
              .Register(registry)),
      optimizer_apply_seconds(prometheus::BuildHistogram()
                                  .Name("tributary_ps_optimizer_apply_seconds")
                                  .Help("Seconds to apply the optimizer to one partition.")
                                  .Register(registry)
                                  .Add({}, SecondsBuckets())),
      step(prometheus::BuildGauge()
               .Name("tributary_ps_step")
               .Help("Lowest step over this shard's partitions.")
               .Register(registry)
               .Add({})),
      generation(prometheus::BuildGauge()
                     .Name("tributary_ps_generation")
                     .Help("Current generation.")
                     .Register(registry)
                     .Add({})),
      partitions(prometheus::BuildGauge()
                     .Name("tributary_ps_partitions")
                     .Help("Partitions this shard owns.")
                     .Register(registry)
                     .Add({})),
      checkpoints_ok(prometheus::BuildCounter()
                         .Name("tributary_ps_checkpoints_total")
                         .Help("Checkpoints written, by result.")
                         .Register(registry)
                         .Add({{"result", "ok"}})),
      checkpoints_error(prometheus::BuildCounter()
                            .Name("tributary_ps_checkpoints_total")
                            .Help("Checkpoints written, by result.")
                            .Register(registry)
                            .Add({{"result", "error"}})),
      checkpoint_backlog_waits(
          prometheus::BuildCounter()
              .Name("tributary_ps_checkpoint_backlog_waits_total")
              .Help("Pushes that waited for the periodic checkpoint writer to catch up.")
              .Register(registry)
              .Add({})),
      init_buffered_bytes(
          prometheus::BuildGauge()
              .Name("tributary_ps_init_buffered_bytes")
              .Help("Initial values held by InitPartitions streams that have not installed "
                    "a job yet.")
              .Register(registry)
              .Add({})),
      checkpoint_age_seconds(prometheus::BuildGauge()
                                 .Name("tributary_ps_checkpoint_age_seconds")
                                 .Help("Seconds since the last checkpoint; -1 when none.")
                                 .Register(registry)
                                 .Add({})),
      last_checkpoint_timestamp_seconds(prometheus::BuildGauge()
                                            .Name("tributary_ps_last_checkpoint_timestamp_seconds")
                                            .Help("Unix time of the last checkpoint; 0 when none.")
                                            .Register(registry)
                                            .Add({})) {
  auto& family = prometheus::BuildCounter()
                     .Name("tributary_ps_pushes_rejected_total")
                     .Help("Pushes refused, by reason; each ended its PushPull stream.")
                     .Register(registry);
  for (size_t i = 0; i < rejected.size(); ++i) {
    rejected[i] = &family.Add({{"reason", RejectReasonName(static_cast<RejectReason>(i))}});
  }
  checkpoint_age_seconds.Set(-1);
}

prometheus::Histogram& ShardMetrics::AggregationWait(uint32_t partition) {
  // Family::Add returns the existing series for labels it already has.
  return aggregation_wait_seconds.Add({{"partition", std::to_string(partition)}}, SecondsBuckets());
}

prometheus::Counter& ShardMetrics::SlowestWait(uint32_t partition) {
  return slowest_wait_seconds.Add({{"partition", std::to_string(partition)}});
}

uint64_t ShardMetrics::RejectedTotal() const {
  double total = 0;
  for (prometheus::Counter* counter : rejected) total += counter->Value();
  return static_cast<uint64_t>(total);
}

}  // namespace tributary::ps
