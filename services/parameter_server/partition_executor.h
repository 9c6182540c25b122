// The shard's summation threads: the LanePool (common/lane_pool.h) keyed by partition
// id, so that every push of a partition is summed on "its" thread, in arrival order:
// the partition's accumulator stays in that core's cache, pushes of one partition
// never contend, and different partitions are summed in parallel.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_

#include <algorithm>

#include "common/lane_pool.h"

namespace tributary::ps {

class PartitionExecutor : public LanePool {
 public:
  // At least one lane, whatever `threads` says: the service relies on Submit running
  // the task later, off the shard's locks (a stream's completion re-enters the shard).
  explicit PartitionExecutor(int threads) : LanePool(std::max(1, threads), "ps-apply") {}
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
