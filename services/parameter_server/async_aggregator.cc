// ASYNC and BOUNDED_STALENESS aggregation (aggregator.h): every push applied on its
// own, the slowest node's step tracked per partition.
#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/wire_dtype.h"
#include "services/parameter_server/aggregator_internal.h"

namespace tributary::ps::internal {
namespace {

class AsyncAggregator : public Aggregator {
 public:
  explicit AsyncAggregator(AggregatorContext context) : context_(std::move(context)) {}

  absl::StatusOr<PushResult> Push(const ShardJob& job, ShardPartition& p,
                                  const GradientPushView& push, NodeSink* sink) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    ShardMetrics& metrics = *context_.metrics;
    const uint64_t step = push.step;
    const uint32_t node = push.node_rank;
    if (step < p.generation_start_step) {
      return CountRejection(
          metrics, RejectReason::kStaleStep,
          absl::FailedPreconditionError(absl::StrCat(
              "stale step ", step, " for partition ", p.id, " from node ", node, ": generation ",
              job.generation, " began at step ", p.generation_start_step)));
    }
    if (p.has_pushed[node]) {
      if (step == p.last_step[node]) {
        metrics.pushes_duplicate.Increment();
        context_.sinks->DeliverTo(sink, p.values);
        return PushResult::kDuplicate;
      }
      if (step < p.last_step[node]) {
        return CountRejection(metrics, RejectReason::kStaleStep,
                              absl::FailedPreconditionError(absl::StrCat(
                                  "stale step ", step, " for partition ", p.id, " from node ", node,
                                  ": it already pushed step ", p.last_step[node])));
      }
    }
    if (job.mode == v1::BOUNDED_STALENESS && step > p.step + job.staleness) {
      for (const HeldPush& held : p.held) {
        if (held.node == node && held.step == step && held.sink == sink) return PushResult::kHeld;
      }
      p.held.push_back(HeldPush{node, step, sink});
      metrics.pushes_held.Increment();
      return PushResult::kHeld;
    }
    if (step >= p.step) p.max_staleness_applied = std::max(p.max_staleness_applied, step - p.step);
    // A node without samples this step only advances; there is nothing to apply.
    // Buffers: node 0's values are taken; the other nodes' leave them as they are.
    if (p.buffers ? node == 0 : push.sample_count > 0) Apply(job, p, push);
    metrics.pushes_accepted.Increment();
    metrics.bytes_in.Increment(static_cast<double>(push.data.size));

    p.has_pushed[node] = 1;
    p.last_step[node] = step;
    uint64_t slowest = UINT64_MAX;
    for (uint32_t n = 0; n < job.num_nodes; ++n) {
      slowest = std::min(slowest, p.has_pushed[n] ? p.last_step[n] + 1 : p.generation_start_step);
    }
    if (slowest != p.step) {
      const uint64_t before = p.step;
      p.step = slowest;
      context_.step_moved(p, before, slowest);
      // Pushes that waited for the slowest node may go in now.
      auto admitted = [&](const HeldPush& held) { return held.step <= p.step + job.staleness; };
      for (const HeldPush& held : p.held) {
        if (admitted(held)) held.sink->Retry(p.id);
      }
      p.held.erase(std::remove_if(p.held.begin(), p.held.end(), admitted), p.held.end());
    }
    context_.sinks->DeliverTo(sink, p.values);
    return PushResult::kAccepted;
  }

  std::string CannotResume(const ShardPartition& p, uint64_t resume,
                           uint32_t shard) const override {
    return "";  // Every step is a resume point: nothing is rolled back.
  }

  void Resume(ShardPartition& p, uint64_t resume, uint32_t num_nodes, uint32_t* rolled_back,
              uint32_t* discarded) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    *discarded += static_cast<uint32_t>(p.held.size());
    p.step = resume;
    p.generation_start_step = resume;
    p.ResetNodes(num_nodes);
    p.spares.reserve(num_nodes + 2);
  }

  bool WaitingFor(const ShardPartition& p,
                  uint32_t node) const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // The slowest node(s).
    return (p.has_pushed[node] ? p.last_step[node] + 1 : p.generation_start_step) == p.step;
  }

  std::optional<Saved> ValuesAt(const ShardPartition& p,
                                uint64_t step) const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Saved saved;
    saved.data.values = p.values;
    saved.data.state = p.state;
    saved.step = p.step;
    return saved;
  }

  uint64_t RestoredStep(const v1::PartitionValues& values, uint64_t recorded) const override {
    return recorded;
  }

 private:
  void Apply(const ShardJob& job, ShardPartition& p, const GradientPushView& push)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    // The gradient sum, widened from the received bytes; divided by the push's samples
    // in the update's one pass (a finite sum divided by a count >= 1 stays finite).
    const bool finite =
        WidenInto(PartitionDtype(p.buffers, job.wire_dtype), push.data, p.sum.data());
    bool applied = false;
    std::shared_ptr<v1::PartitionValues> next =
        NextUpdate(job, p, p.values->version(), finite,
                   static_cast<float>(std::max<uint64_t>(1, push.sample_count)), context_, &applied);
    if (!applied) {
      LOG_EVERY_N(WARNING, 100) << "partition " << p.id << " step " << push.step << " from node "
                                << push.node_rank << ": non-finite gradient; update skipped ("
                                << google::COUNTER << " so far)";
    }
    next->set_step(push.step + 1);
    p.Retire(std::move(p.values));
    p.values = std::move(next);
  }

  const AggregatorContext context_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeAsyncAggregator(AggregatorContext context) {
  return std::make_unique<AsyncAggregator>(std::move(context));
}

}  // namespace tributary::ps::internal
