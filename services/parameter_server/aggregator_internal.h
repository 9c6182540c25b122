// Shared by the aggregators (aggregator.cc, sync_aggregator.cc, async_aggregator.cc);
// not part of the shard's interface.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_

#include <memory>

#include "services/parameter_server/aggregator.h"

namespace tributary::ps::internal {

// Cheap elementwise mean: one division pass the compiler vectorizes.
inline void DivideInPlace(float* data, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) data[i] /= divisor;
}

// The partition's next values: a copy of the current ones with the update applied
// (the optimizer as update `update_number` on the mean gradient in p.sum, or node 0's
// buffers copied) and the version advanced, when `finite`; unchanged and counted as
// skipped otherwise (*applied says which). The caller sets the step and publishes.
std::shared_ptr<v1::PartitionValues> NextUpdate(const ShardJob& job, ShardPartition& p,
                                                uint64_t update_number, bool finite,
                                                const AggregatorContext& context, bool* applied)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);

std::unique_ptr<Aggregator> MakeSyncAggregator(AggregatorContext context);
std::unique_ptr<Aggregator> MakeAsyncAggregator(AggregatorContext context);

}  // namespace tributary::ps::internal

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_
