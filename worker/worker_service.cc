#include "worker/worker_service.h"

namespace tributary::worker {

grpc::ServerUnaryReactor* WorkerService::GetStatus(grpc::CallbackServerContext* context,
                                                   const v1::GetWorkerStatusRequest*,
                                                   v1::WorkerStatus* response) {
  *response = handler_.GetStatus();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Drain(grpc::CallbackServerContext* context,
                                               const v1::DrainRequest* request,
                                               v1::DrainResponse* response) {
  response->set_phase(
      handler_.Drain(request->reason().empty() ? "Drain RPC" : request->reason()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tributary::worker
