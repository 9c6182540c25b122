#include "worker/worker_service.h"

#include "common/grpc_status.h"

namespace tributary::worker {

grpc::ServerUnaryReactor* WorkerService::GetStatus(grpc::CallbackServerContext* context,
                                                   const v1::GetWorkerStatusRequest*,
                                                   v1::WorkerStatus* response) {
  if (absl::Status allowed =
          Authorize(auth_.get(), *context, kAnyRole, "GetStatus");
      !allowed.ok()) {
    grpc::ServerUnaryReactor* refused = context->DefaultReactor();
    refused->Finish(ToGrpcStatus(allowed));
    return refused;
  }
  *response = handler_.GetStatus();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Drain(grpc::CallbackServerContext* context,
                                               const v1::DrainRequest* request,
                                               v1::DrainResponse* response) {
  if (absl::Status allowed = Authorize(auth_.get(), *context,
                                      Role::kCoordinator | Role::kOperator, "Drain");
      !allowed.ok()) {
    grpc::ServerUnaryReactor* refused = context->DefaultReactor();
    refused->Finish(ToGrpcStatus(allowed));
    return refused;
  }
  response->set_phase(
      handler_.Drain(request->reason().empty() ? "Drain RPC" : request->reason()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tributary::worker
