#include "cli/parameters.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "common/float_file.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/tls.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/comm/ps_client.h"

namespace tributary::cli {

absl::StatusOr<PulledParameters> PullPlannedParameters(const v1::ClusterStatus& cluster,
                                                       const ChannelOptions& options,
                                                       const std::string& job_id,
                                                       const v1::PartitionPlan& plan) {
  std::vector<v1::ShardInfo> shards;
  for (const v1::ShardSummary& summary : cluster.shards()) shards.push_back(summary.shard());
  if (shards.empty()) return absl::FailedPreconditionError("the coordinator knows no PS shards");
  ChannelOptions shard_options = options;
  shard_options.max_receive_bytes =
      std::max<int64_t>(options.max_receive_bytes, plan.partition_bytes() + (1 << 20));
  worker::PsClient client(worker::PsIdentity{job_id, 0, 0}, plan, std::move(shards),
                          shard_options, v1::SYNC, v1::FLOAT32, absl::Seconds(20));
  PulledParameters result;
  result.job_id = job_id;
  result.values.resize(static_cast<size_t>(plan.total_elements()));
  absl::StatusOr<uint64_t> step = client.PullAll(result.values.data());
  if (!step.ok()) return step.status();
  result.step = *step;
  return result;
}

absl::StatusOr<PulledParameters> PullParameters(std::shared_ptr<grpc::Channel> coordinator,
                                                const ChannelOptions& options) {
  v1::ClusterStatus cluster;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Status status = FromGrpcStatus(
        v1::Coordinator::NewStub(coordinator)
            ->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &cluster),
        "GetClusterStatus");
    if (!status.ok()) return status;
  }
  if (cluster.shards_size() == 0) {
    return absl::FailedPreconditionError("the coordinator knows no PS shards");
  }
  // The layout as the shards hold it: each one's partitions, from its status.
  std::string job_id;
  std::map<uint32_t, v1::Partition> partitions;
  for (const v1::ShardSummary& summary : cluster.shards()) {
    const std::string& address = summary.shard().address();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(address, options);
    if (!channel.ok()) return channel.status();
    v1::ShardStatus status;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Status rpc = FromGrpcStatus(
        v1::ParameterServer::NewStub(*channel)->GetShardStatus(
            &context, v1::GetShardStatusRequest(), &status),
        absl::StrCat("GetShardStatus of shard ", summary.shard().shard_index(), " at ", address));
    if (!rpc.ok()) return rpc;
    if (status.job_id().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", summary.shard().shard_index(), " at ", address, " holds no job"));
    }
    job_id = status.job_id();
    for (const v1::PartitionStatus& held : status.partitions()) {
      v1::Partition& partition = partitions[held.partition_id()];
      partition.set_id(held.partition_id());
      partition.set_offset(held.offset());
      partition.set_length(held.length());
      partition.set_shard(summary.shard().shard_index());
    }
  }
  v1::PartitionPlan plan;
  int64_t next = 0, largest = 0;
  for (const auto& [id, partition] : partitions) {
    if (id != static_cast<uint32_t>(plan.partitions_size()) || partition.offset() != next) {
      return absl::DataLossError(absl::StrCat("no shard holds elements [", next, ", ",
                                              partition.offset(), ") (partition ",
                                              plan.partitions_size(), ")"));
    }
    *plan.add_partitions() = partition;
    next += partition.length();
    largest = std::max(largest, partition.length());
  }
  plan.set_total_elements(next);
  plan.set_partition_bytes(largest * 4);
  return PullPlannedParameters(cluster, options, job_id, plan);
}

absl::Status WriteParameters(const PulledParameters& params, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(params.values.data()),
            params.values.size() * sizeof(float));
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadParameters(const std::string& path) {
  return ReadFloatFile(path, kMaxModelParameters * sizeof(float));
}

}  // namespace tributary::cli
