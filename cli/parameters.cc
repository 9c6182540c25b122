#include "cli/parameters.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/tls.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"

namespace tributary::cli {

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
  PulledParameters result;
  result.step = ~uint64_t{0};
  std::map<int64_t, int64_t> covered;  // offset -> length
  std::vector<float> values;
  for (const v1::ShardSummary& summary : cluster.shards()) {
    const std::string& address = summary.shard().address();
    ChannelOptions shard_options = options;
    shard_options.max_receive_bytes = std::max<int64_t>(options.max_receive_bytes, 300 << 20);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(address, shard_options);
    if (!channel.ok()) return channel.status();
    auto stub = v1::ParameterServer::NewStub(*channel);
    v1::ShardStatus status;
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      absl::Status rpc = FromGrpcStatus(
          stub->GetShardStatus(&context, v1::GetShardStatusRequest(), &status),
          absl::StrCat("GetShardStatus of shard ", summary.shard().shard_index(), " at ", address));
      if (!rpc.ok()) return rpc;
    }
    if (status.job_id().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", summary.shard().shard_index(), " at ", address, " holds no job"));
    }
    result.job_id = status.job_id();
    std::map<uint32_t, std::pair<int64_t, int64_t>> ranges;
    for (const v1::PartitionStatus& partition : status.partitions()) {
      ranges[partition.partition_id()] = {partition.offset(), partition.length()};
      const int64_t end = partition.offset() + partition.length();
      if (static_cast<int64_t>(values.size()) < end) values.resize(end);
    }
    grpc::ClientContext context;
    v1::PullRequest request;
    request.set_job_id(status.job_id());
    auto reader = stub->Pull(&context, request);
    v1::PartitionValues partition;
    while (reader->Read(&partition)) {
      auto range = ranges.find(partition.partition_id());
      if (range == ranges.end() ||
          partition.data().size() != static_cast<size_t>(range->second.second) * 4) {
        context.TryCancel();
        reader->Finish();
        return absl::DataLossError(absl::StrCat("shard at ", address, " sent partition ",
                                                partition.partition_id(), " with ",
                                                partition.data().size(), " bytes"));
      }
      std::memcpy(values.data() + range->second.first, partition.data().data(),
                  partition.data().size());
      covered[range->second.first] = range->second.second;
      result.step = std::min(result.step, partition.step());
    }
    absl::Status pulled = FromGrpcStatus(reader->Finish(), absl::StrCat("Pull from ", address));
    if (!pulled.ok()) return pulled;
  }
  int64_t next = 0;
  for (const auto& [offset, length] : covered) {
    if (offset != next) {
      return absl::DataLossError(absl::StrCat("no shard holds elements [", next, ", ", offset, ")"));
    }
    next = offset + length;
  }
  if (next != static_cast<int64_t>(values.size())) {
    return absl::DataLossError(absl::StrCat("partitions end at ", next, " of ", values.size()));
  }
  result.values = std::move(values);
  return result;
}

absl::Status WriteParameters(const PulledParameters& params, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(params.values.data()),
            params.values.size() * sizeof(float));
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadParameters(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", bytes->size(), " bytes is not a whole number of float32"));
  }
  std::vector<float> values(bytes->size() / sizeof(float));
  std::memcpy(values.data(), bytes->data(), bytes->size());
  return values;
}

}  // namespace tributary::cli
