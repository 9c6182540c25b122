#include "services/coordinator/grpc_shard_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace tributary::coordinator {
namespace {

// RestoreJob's deadline at least (see GrpcShardClient::RestoreJob).
constexpr absl::Duration kRestoreTimeout = absl::Minutes(2);

std::string Name(const std::string& rpc, const v1::ShardInfo& shard) {
  return absl::StrCat(rpc, " on PS shard ", shard.shard_index(), " at ", shard.address());
}

}  // namespace

GrpcShardClient::GrpcShardClient(ChannelOptions options, absl::Duration timeout)
    : options_(std::move(options)), timeout_(timeout) {}

absl::StatusOr<v1::ParameterServer::Stub*> GrpcShardClient::Stub(const v1::ShardInfo& shard) {
  absl::MutexLock lock(&mu_);
  auto found = stubs_.find(shard.address());
  if (found != stubs_.end()) return found->second.get();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(shard.address(), options_);
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("PS shard ", shard.shard_index(), " at ", shard.address(),
                                     ": ", channel.status().message()));
  }
  auto stub = v1::ParameterServer::NewStub(*channel);
  v1::ParameterServer::Stub* raw = stub.get();
  stubs_[shard.address()] = std::move(stub);
  return raw;
}

absl::StatusOr<v1::ShardStatus> GrpcShardClient::GetShardStatus(const v1::ShardInfo& shard) {
  absl::StatusOr<v1::ParameterServer::Stub*> stub = Stub(shard);
  if (!stub.ok()) return stub.status();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::ShardStatus status;
  const grpc::Status rpc = (*stub)->GetShardStatus(&context, v1::GetShardStatusRequest(), &status);
  if (!rpc.ok()) return FromGrpcStatus(rpc, Name("GetShardStatus", shard));
  return status;
}

absl::StatusOr<v1::BeginGenerationResponse> GrpcShardClient::BeginGeneration(
    const v1::ShardInfo& shard, const v1::BeginGenerationRequest& request) {
  absl::StatusOr<v1::ParameterServer::Stub*> stub = Stub(shard);
  if (!stub.ok()) return stub.status();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::BeginGenerationResponse response;
  const grpc::Status rpc = (*stub)->BeginGeneration(&context, request, &response);
  if (!rpc.ok()) return FromGrpcStatus(rpc, Name("BeginGeneration", shard));
  return response;
}

absl::Status GrpcShardClient::EndJob(const v1::ShardInfo& shard, const std::string& job_id) {
  absl::StatusOr<v1::ParameterServer::Stub*> stub = Stub(shard);
  if (!stub.ok()) return stub.status();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::EndJobRequest request;
  request.set_job_id(job_id);
  v1::EndJobResponse response;
  return FromGrpcStatus((*stub)->EndJob(&context, request, &response), Name("EndJob", shard));
}

absl::StatusOr<v1::RestoreJobResponse> GrpcShardClient::RestoreJob(
    const v1::ShardInfo& shard, const v1::RestoreJobRequest& request) {
  absl::StatusOr<v1::ParameterServer::Stub*> stub = Stub(shard);
  if (!stub.ok()) return stub.status();
  grpc::ClientContext context;
  // The shard reads and checks whole checkpoint files (a large model's take seconds):
  // at least kRestoreTimeout, so that a slow read is not taken for a dead shard.
  context.set_deadline(absl::ToChronoTime(absl::Now() + std::max(timeout_, kRestoreTimeout)));
  v1::RestoreJobResponse response;
  const grpc::Status rpc = (*stub)->RestoreJob(&context, request, &response);
  if (!rpc.ok()) return FromGrpcStatus(rpc, Name("RestoreJob", shard));
  return response;
}

}  // namespace tributary::coordinator
