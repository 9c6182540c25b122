// The calls a PsClient makes to one shard outside the PushPull lanes: InitPartitions
// (install the job with its initial values) and Pull (the current values), and the
// check every update and pulled value passes before it is written anywhere.
#ifndef TRIBUTARY_WORKER_COMM_SHARD_CALLS_H_
#define TRIBUTARY_WORKER_COMM_SHARD_CALLS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition_codec.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/comm/ps_connection.h"

namespace tributary::worker {

struct ShardRef {
  v1::ParameterServer::Stub* stub = nullptr;
  uint32_t index = 0;
  std::string name;  // "PS shard 0 at host:port"
};

// InitPartitions: the plan, the spec and the initial values of the shard's
// `partitions` (params: the whole flat buffer). The step the shard stands at.
absl::StatusOr<uint64_t> InstallJob(const ShardRef& shard, const PsIdentity& identity,
                                    const v1::PartitionPlan& plan,
                                    const std::vector<uint32_t>& partitions,
                                    const v1::JobSpec& spec, uint64_t total_steps,
                                    const float* params);

// Pull: every value the shard sends, checked and written into params; marks the
// partitions it sent in `seen` and counts their bytes into *bytes. The lowest step.
absl::StatusOr<uint64_t> PullFromShard(const ShardRef& shard, const std::string& job_id,
                                       const v1::PartitionPlan& plan, float* params,
                                       std::vector<bool>& seen, uint64_t* bytes);

// Values that fit the plan: a known partition, FLOAT32, the partition's length.
absl::Status CheckPartitionValues(const v1::PartitionPlan& plan,
                                  const PartitionValuesView& values);

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_SHARD_CALLS_H_
