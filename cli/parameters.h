// The current parameters of the active job, gathered from every PS shard the
// coordinator knows, as one flat float32 buffer (what a replica holds). Written as
// raw little-endian float32, the format of train_local --save_params, so the two can
// be compared byte for byte.
#ifndef TRIBUTARY_CLI_PARAMETERS_H_
#define TRIBUTARY_CLI_PARAMETERS_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "common/channel.h"
#include "proto/coordinator.pb.h"
#include "proto/tensor.pb.h"

namespace tributary::cli {

struct PulledParameters {
  std::string job_id;
  uint64_t step = 0;           // Lowest step over the partitions.
  std::vector<float> values;   // The whole flat buffer.
};

// Asks the coordinator for the shard map, each shard for its partitions (the layout as
// the shards hold it, so no model is needed), and pulls them. DATA_LOSS naming the gap
// when partitions are missing.
absl::StatusOr<PulledParameters> PullParameters(std::shared_ptr<grpc::Channel> coordinator,
                                                const ChannelOptions& options);

// Pulls job `job_id`'s partitions of `plan` from the shards `cluster` lists (through
// the worker's PS client, with its retries; a shard that no longer holds the job
// answers from its checkpoint). DATA_LOSS when a partition came from no shard.
absl::StatusOr<PulledParameters> PullPlannedParameters(const v1::ClusterStatus& cluster,
                                                       const ChannelOptions& options,
                                                       const std::string& job_id,
                                                       const v1::PartitionPlan& plan);

absl::Status WriteParameters(const PulledParameters& params, const std::string& path);

// Reads a raw float32 file; INVALID_ARGUMENT when its size is not a multiple of 4.
absl::StatusOr<std::vector<float>> ReadParameters(const std::string& path);

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_PARAMETERS_H_
