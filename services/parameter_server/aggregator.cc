#include "services/parameter_server/aggregator.h"

#include <glog/logging.h>

#include <cstring>

#include "services/parameter_server/aggregator_internal.h"

namespace tributary::ps {

std::unique_ptr<Aggregator> MakeAggregator(v1::TrainingMode mode, AggregatorContext context) {
  if (mode == v1::SYNC || mode == v1::LOCAL_SGD) {
    return internal::MakeSyncAggregator(std::move(context));
  }
  return internal::MakeAsyncAggregator(std::move(context));
}

absl::Status CountRejection(ShardMetrics& metrics, RejectReason reason, absl::Status status) {
  metrics.Rejected(reason).Increment();
  VLOG(1) << "push rejected (" << RejectReasonName(reason) << "): " << status;
  return status;
}

namespace internal {

std::shared_ptr<v1::PartitionValues> NextUpdate(const ShardJob& job, ShardPartition& p,
                                                uint64_t update_number, bool finite,
                                                float divisor, const AggregatorContext& context,
                                                bool* applied, const char* last,
                                                bool* last_finite, bool state_in_prev) {
  std::shared_ptr<v1::PartitionValues> next = p.FreshValues();
  float* params = reinterpret_cast<float*>(next->mutable_data()->data());
  const float* current = reinterpret_cast<const float*>(p.values->data().data());
  next->set_version(p.values->version());
  *applied = finite;
  const float* state_from = state_in_prev ? p.prev_state.data() : nullptr;
  if (!finite) {
    std::memcpy(params, current, p.length * sizeof(float));
    if (state_in_prev) p.state = p.prev_state;  // The same size: copies without allocating.
    ++p.skipped_non_finite;
    context.metrics->updates_skipped_non_finite.Increment();
    return next;
  }
  const absl::Time start = context.clock->Now();
  if (p.buffers) {
    std::memcpy(params, p.sum.data(), p.length * sizeof(float));  // Node 0's buffers.
    if (state_in_prev) p.state = p.prev_state;
  } else if (last != nullptr) {
    if (!job.optimizer.ApplyMeanAdding(update_number, current, params,
                                       p.pushed_count > 1 ? p.sum.data() : nullptr, last,
                                       divisor, p.state.data(), p.length, state_from)) {
      p.state = p.prev_state;  // The same size: copies without allocating.
      std::memcpy(params, current, p.length * sizeof(float));
      *applied = false;
      *last_finite = false;
      ++p.skipped_non_finite;
      context.metrics->updates_skipped_non_finite.Increment();
      return next;
    }
  } else {
    job.optimizer.ApplyMean(update_number, current, params, p.sum.data(), divisor,
                            p.state.data(), p.length, state_from);
  }
  context.metrics->optimizer_apply_seconds.Observe(
      absl::ToDoubleSeconds(context.clock->Now() - start));
  next->set_version(next->version() + 1);
  context.metrics->updates_applied.Increment();
  return next;
}

}  // namespace internal
}  // namespace tributary::ps
