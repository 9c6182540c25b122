// Shared by the aggregators (aggregator.cc, sync_aggregator.cc, async_aggregator.cc);
// not part of the shard's interface.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_

#include <memory>

#include "services/parameter_server/aggregator.h"

namespace tributary::ps::internal {

// The partition's next values, in one pass over them: the current ones after the
// update (the optimizer as update `update_number` on the mean gradient p.sum /
// divisor, or node 0's buffers from p.sum) with the version advanced, when `finite`;
// a copy of the current ones, counted as skipped, otherwise (*applied says which).
// The caller sets the step and publishes.
// `last` (not null): the step's final push, FLOAT32, not yet added to p.sum (which
// holds the pushes before it, if p.pushed_count > 1): added inside the optimizer's
// pass (Optimizer::ApplyMeanAdding). When it or the sum is not finite, p.state is
// put back from p.prev_state, the update is skipped and *last_finite set false.
// `state_in_prev`: the state before the update is p.prev_state (the caller swapped the
// two) and the new one is written into p.state, which holds it whatever happens.
std::shared_ptr<v1::PartitionValues> NextUpdate(const ShardJob& job, ShardPartition& p,
                                                uint64_t update_number, bool finite,
                                                float divisor, const AggregatorContext& context,
                                                bool* applied, const char* last = nullptr,
                                                bool* last_finite = nullptr,
                                                bool state_in_prev = false)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);

std::unique_ptr<Aggregator> MakeSyncAggregator(AggregatorContext context);
std::unique_ptr<Aggregator> MakeAsyncAggregator(AggregatorContext context);

}  // namespace tributary::ps::internal

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_AGGREGATOR_INTERNAL_H_
