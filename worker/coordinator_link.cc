#include "worker/coordinator_link.h"

#include <grpcpp/client_context.h>

#include "common/cluster_auth.h"
#include "common/grpc_status.h"
#include "worker/model_fetch.h"

namespace tributary::worker {
namespace {

std::unique_ptr<grpc::ClientContext> Deadline(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcCoordinatorLink>> GrpcCoordinatorLink::Create(
    const std::string& address, const ChannelOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(address, options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<GrpcCoordinatorLink>(new GrpcCoordinatorLink(*std::move(channel)));
}

GrpcCoordinatorLink::GrpcCoordinatorLink(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(v1::Coordinator::NewStub(channel_)) {}

void GrpcCoordinatorLink::AddWorkerCredential(grpc::ClientContext& context) {
  absl::MutexLock lock(&mu_);
  if (!worker_credential_.empty()) {
    context.AddMetadata(kWorkerCredentialMetadata, worker_credential_);
  }
}

absl::StatusOr<v1::RegisterWorkerResponse> GrpcCoordinatorLink::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  v1::RegisterWorkerResponse response;
  auto context = Deadline(absl::Seconds(10));
  const grpc::Status status = stub_->RegisterWorker(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status, "RegisterWorker");
  absl::MutexLock lock(&mu_);
  worker_credential_ = response.worker_credential();
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> GrpcCoordinatorLink::Heartbeat(
    const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  auto context = Deadline(absl::Seconds(10));
  AddWorkerCredential(*context);
  const grpc::Status status = stub_->Heartbeat(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status, "Heartbeat");
  return response;
}

absl::Status GrpcCoordinatorLink::Deregister(const v1::DeregisterRequest& request) {
  v1::DeregisterResponse response;
  auto context = Deadline(absl::Seconds(5));
  AddWorkerCredential(*context);
  return FromGrpcStatus(stub_->Deregister(context.get(), request, &response), "Deregister");
}

absl::StatusOr<std::shared_ptr<const std::string>> GrpcCoordinatorLink::FetchModel(
    const v1::TorchScriptFile& file, absl::Duration timeout) {
  return FetchModelFile(*stub_, file, timeout);
}

std::unique_ptr<RendezvousClient> GrpcCoordinatorLink::Rendezvous(
    const std::string& rendezvous_id) {
  return MakeCoordinatorRendezvousClient(channel_, rendezvous_id);
}

}  // namespace tributary::worker
