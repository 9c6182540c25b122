// The cluster as GetClusterStatus, ListWorkers, GetJob and the dashboard show it: the
// shown job with why it waits, the running generation's nodes and workers with
// stragglers marked, the idle workers and the shards. Pure functions of the
// coordinator's parts; Coordinator calls them under its lock.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_CLUSTER_STATUS_VIEW_H_
#define TRIBUTARY_SERVICES_COORDINATOR_CLUSTER_STATUS_VIEW_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/generation_planner.h"
#include "services/coordinator/job_book.h"
#include "services/coordinator/shard_directory.h"
#include "services/coordinator/worker_registry.h"

namespace tributary::coordinator {

struct StatusInputs {
  const JobBook* jobs = nullptr;
  const WorkerRegistry* workers = nullptr;
  const ShardDirectory* shards = nullptr;
  const Generation* generation = nullptr;  // The current one (active or not).
  std::string waiting_reason;              // GenerationPlanner::waiting_reason().
  std::string version;
  double straggler_factor = 1.5;
};

v1::ClusterStatus ClusterStatusOf(const StatusInputs& inputs, absl::Time now);

// Sets job.waiting_reason when `job` is the active one: while no generation runs, to
// `waiting_reason` (GenerationPlanner's); while one runs, to `unreachable_shards`
// (ShardDirectory::UnreachableNote) when a shard does not answer, since the job then
// waits for it.
void FillWaitingReason(v1::Job& job, bool generation_active, const std::string& waiting_reason,
                       const std::string& unreachable_shards);

// Step time above which a worker is a straggler: `factor` x the median of the
// generation's step times (the lower one for an even count, so one slow worker of
// two stands out); 0 (nobody) with fewer than two times.
double StragglerThreshold(std::vector<double> step_times, double factor);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_CLUSTER_STATUS_VIEW_H_
