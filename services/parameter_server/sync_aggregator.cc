// SYNC and LOCAL_SGD aggregation (aggregator.h): one step (round) at a time, every
// node's push summed, the update applied when the last one arrives.
#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/wire_dtype.h"
#include "services/parameter_server/aggregator_internal.h"

namespace tributary::ps::internal {
namespace {

class SyncAggregator : public Aggregator {
 public:
  explicit SyncAggregator(AggregatorContext context) : context_(std::move(context)) {}

  absl::StatusOr<PushResult> Push(const ShardJob& job, ShardPartition& p,
                                  const GradientPushView& push, NodeSink* sink) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    ShardMetrics& metrics = *context_.metrics;
    const uint64_t step = push.step;
    const uint32_t node = push.node_rank;
    if (step == p.step) {
      if (p.pushed[node]) {
        metrics.pushes_duplicate.Increment();
        return PushResult::kDuplicate;  // Its values come with the step's completion.
      }
      const uint32_t steps = std::max<uint32_t>(1, push.steps);
      if (p.pushed_count > 0 && steps != p.round_steps) {
        return CountRejection(
            metrics, RejectReason::kWrongSteps,
            absl::InvalidArgumentError(absl::StrCat(
                "partition ", p.id, " of step ", step, " from node ", node, ": the push covers ",
                steps, " step(s) but the round's first push covered ", p.round_steps)));
      }
      if (p.pushed_count == 0) {
        p.first_push = context_.clock->Now();
        p.arrivals_after_first = 0;
        p.last_arrival_after_first = 0;
        p.round_steps = steps;
      } else {
        p.last_arrival_after_first = absl::ToDoubleSeconds(context_.clock->Now() - p.first_push);
        p.arrivals_after_first += p.last_arrival_after_first;
      }
      // Summed straight from the received bytes; a sum that goes non-finite counts
      // against the node whose push made it so. The push that completes the step, when
      // it lies in one piece (always on the TCP data plane) as FLOAT32, is added inside
      // the optimizer's pass instead (one pass over the data less).
      const bool completes = p.pushed_count + 1 == job.num_nodes;
      const bool fuse = completes && !p.buffers && job.wire_dtype == v1::FLOAT32 &&
                        push.data.pieces.size() == 1;
      bool finite = true;
      if (fuse) {
        // Added (and checked) in CompleteStep.
      } else if (p.buffers) {
        // Only node 0's buffers count; the other nodes' pushes just complete the step.
        if (node == 0) finite = WidenInto(v1::FLOAT32, push.data, p.sum.data());
      } else if (p.pushed_count == 0) {
        finite = WidenInto(job.wire_dtype, push.data, p.sum.data());
      } else {
        finite = AccumulateInto(job.wire_dtype, push.data, p.sum.data());
      }
      if (!finite) p.non_finite_nodes.push_back(node);
      p.pushed[node] = 1;
      ++p.pushed_count;
      p.samples += push.sample_count;
      metrics.pushes_accepted.Increment();
      metrics.bytes_in.Increment(static_cast<double>(push.data.size));
      if (p.pushed_count == job.num_nodes) {
        CompleteStep(job, p, fuse ? push.data.pieces[0].data() : nullptr, node);
      }
      return PushResult::kAccepted;
    }
    if (step < p.step && step >= p.generation_start_step) {
      // Every node pushed every completed step of this generation: an exact duplicate.
      metrics.pushes_duplicate.Increment();
      context_.sinks->DeliverTo(sink, p.values);
      return PushResult::kDuplicate;
    }
    if (step < p.step) {
      return CountRejection(
          metrics, RejectReason::kStaleStep,
          absl::FailedPreconditionError(
              absl::StrCat("stale step ", step, " for partition ", p.id, " from node ", node,
                           ": generation ", job.generation, " began at step ",
                           p.generation_start_step, " and the partition is at step ", p.step)));
    }
    return CountRejection(
        metrics, RejectReason::kStepAhead,
        absl::FailedPreconditionError(absl::StrCat(
            "step ", step, " for partition ", p.id, " from node ", node,
            " is ahead: the partition is at step ", p.step, " (",
            v1::TrainingMode_Name(job.mode), " runs one ",
            job.mode == v1::LOCAL_SGD ? "round" : "step", " at a time)")));
  }

  std::string CannotResume(const ShardPartition& p, uint64_t resume,
                           uint32_t shard) const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const bool at = p.step == resume;
    // One step (LOCAL_SGD: one round) ahead, with the values of `resume` kept.
    const bool one_ahead =
        p.step > resume && p.prev_values != nullptr && p.prev_values->step() == resume;
    if (at || one_ahead) return "";
    return absl::StrCat("partition ", p.id, " of shard ", shard, " is at step ", p.step,
                        p.prev_values != nullptr
                            ? absl::StrCat(" and keeps step ", p.prev_values->step())
                            : std::string(" and keeps no earlier step"));
  }

  void Resume(ShardPartition& p, uint64_t resume, uint32_t num_nodes, uint32_t* rolled_back,
              uint32_t* discarded) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    if (p.pushed_count > 0) ++*discarded;
    if (p.step != resume) {  // One step (round) ahead: CannotResume said so.
      p.Retire(std::move(p.values));
      p.values = std::move(p.prev_values);
      p.state.swap(p.prev_state);
      ++*rolled_back;
    }
    p.step = resume;
    p.generation_start_step = resume;
    p.ResetNodes(num_nodes);
    p.spares.reserve(num_nodes + 2);
  }

  bool WaitingFor(const ShardPartition& p,
                  uint32_t node) const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !p.pushed[node];  // Who has not pushed this step.
  }

  std::optional<Saved> ValuesAt(const ShardPartition& p,
                                uint64_t step) const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Saved saved;
    if (p.step == step) {
      saved.data.values = p.values;
      saved.data.state = p.state;
    } else if (p.step > step && p.prev_values != nullptr && p.prev_values->step() == step) {
      saved.data.values = p.prev_values;
      saved.data.state = p.prev_state;
    } else {
      return std::nullopt;
    }
    saved.step = saved.data.values->step();
    return saved;
  }

  uint64_t RestoredStep(const v1::PartitionValues& values, uint64_t recorded) const override {
    return values.step();
  }

 private:
  // last: the final push, not yet summed (NextUpdate), from node last_node.
  void CompleteStep(const ShardJob& job, ShardPartition& p, const char* last, uint32_t last_node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
    const absl::Time now = context_.clock->Now();
    // Finite sums divided by a count of at least one stay finite: the accumulation
    // already checked every element. Zero samples (every node's share was empty)
    // leave nothing to apply.
    const bool finite = p.non_finite_nodes.empty() && (p.buffers || p.samples > 0);
    // The state before this step becomes prev_state without a copy: the optimizer reads
    // it there and writes the new state into the other buffer (the same size from the
    // first step on, so nothing is allocated after it).
    p.prev_state.swap(p.state);
    p.state.resize(p.prev_state.size());
    bool applied = false;
    bool last_finite = true;
    std::shared_ptr<v1::PartitionValues> next =
        NextUpdate(job, p, p.step, finite, static_cast<float>(p.samples), context_, &applied,
                   last, &last_finite, /*state_in_prev=*/true);
    if (!last_finite) p.non_finite_nodes.push_back(last_node);
    if (!applied && p.samples > 0) {
      LOG_EVERY_N(WARNING, 100) << "partition " << p.id << " step " << p.step
                                << ": non-finite gradient (or sum) after node(s) "
                                << absl::StrJoin(p.non_finite_nodes, ",")
                                << "; update skipped, parameters unchanged (" << google::COUNTER
                                << " so far)";
    }
    const uint64_t from = p.step;
    const uint64_t to = p.step + p.round_steps;
    next->set_step(to);
    const double wait = absl::ToDoubleSeconds(now - p.first_push);
    if (p.aggregation_wait == nullptr) {
      p.aggregation_wait = &context_.metrics->AggregationWait(p.id);
    }
    p.aggregation_wait->Observe(wait);
    ++p.aggregation_waits;
    p.aggregation_wait_seconds += wait;
    // Each node's push waited from its arrival to the last one's: the sum over the nodes
    // is nodes x (last - first) minus every arrival after the first (the last's included).
    const double waited_for_last = std::max(
        0.0, static_cast<double>(p.pushed_count) * p.last_arrival_after_first -
                 p.arrivals_after_first);
    if (p.slowest_wait == nullptr) p.slowest_wait = &context_.metrics->SlowestWait(p.id);
    p.slowest_wait->Increment(waited_for_last);

    p.Retire(std::move(p.prev_values));
    p.prev_values = std::move(p.values);
    p.values = std::move(next);
    p.step = to;
    std::fill(p.pushed.begin(), p.pushed.end(), 0);
    p.pushed_count = 0;
    p.samples = 0;
    p.round_steps = 0;
    p.non_finite_nodes.clear();
    context_.sinks->DeliverToAll(p.values);
    context_.step_moved(p, from, to);
  }

  const AggregatorContext context_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeSyncAggregator(AggregatorContext context) {
  return std::make_unique<SyncAggregator>(std::move(context));
}

}  // namespace tributary::ps::internal
