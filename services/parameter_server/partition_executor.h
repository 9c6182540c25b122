// The shard's summation threads: the LanePool (common/lane_pool.h) keyed by partition
// id, so that every push of a partition is summed on "its" thread, in arrival order:
// the partition's accumulator stays in that core's cache, pushes of one partition
// never contend, and different partitions are summed in parallel.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_

#include <algorithm>

#include "absl/strings/string_view.h"
#include "common/lane_pool.h"

namespace tributary::ps {

class PartitionExecutor : public LanePool {
 public:
  // At least one lane, whatever `threads` says: the service relies on Submit running
  // the task later, off the shard's locks (a stream's completion re-enters the shard).
  // The lanes are named "<name>-<index>" (`top -H`) and run as hand-off threads (a
  // push handed to a lane is on its step's critical path: common/thread_slice.h).
  explicit PartitionExecutor(int threads, absl::string_view name = "ps-apply")
      : LanePool(std::max(1, threads), name, Work::kHandoff) {}
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARTITION_EXECUTOR_H_
