#include "worker/worker_service.h"

#include "absl/strings/str_cat.h"
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
  // The reason is logged and becomes the Deregister reason: 1 KiB of it at most.
  std::string reason = request->reason().empty() ? "Drain RPC" : request->reason();
  if (reason.size() > kMaxDrainReasonBytes) {
    reason = absl::StrCat(reason.substr(0, kMaxDrainReasonBytes), "... (",
                          reason.size() - kMaxDrainReasonBytes, " more bytes)");
  }
  response->set_phase(handler_.Drain(reason));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tributary::worker
