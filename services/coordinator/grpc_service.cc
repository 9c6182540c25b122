#include "services/coordinator/grpc_service.h"

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "services/coordinator/control_token.h"

namespace tributary::coordinator {
namespace {

ReplyCallback FinishWith(grpc::ServerUnaryReactor* reactor) {
  return [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); };
}

// A rendezvous wait: answered by the store's callback, or cancelled when the client
// goes away so that the store does not keep it until its timeout.
class WaitReactor : public grpc::ServerUnaryReactor {
 public:
  explicit WaitReactor(CoordinatorHandler* handler) : handler_(handler) {}

  void Start(const v1::WaitRendezvousRequest& request, v1::WaitRendezvousResponse* response) {
    const uint64_t wait_id = handler_->HandleWaitRendezvous(request, response, FinishWith(this));
    if (wait_id == 0) return;  // Already answered.
    absl::MutexLock lock(&mu_);
    wait_id_ = wait_id;
    if (cancelled_) CancelLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    CancelLocked();
  }

  void OnDone() override { delete this; }

 private:
  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (wait_id_ != 0 && handler_->CancelWaitRendezvous(wait_id_)) {
      wait_id_ = 0;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the wait"));
    }
  }

  CoordinatorHandler* handler_;
  absl::Mutex mu_;
  uint64_t wait_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

CoordinatorGrpcService::CoordinatorGrpcService(CoordinatorHandler* handler,
                                               std::optional<std::string> control_token)
    : handler_(handler), control_token_(std::move(control_token)) {}

bool CoordinatorGrpcService::Authorized(grpc::CallbackServerContext* context,
                                        grpc::ServerUnaryReactor* reactor, const std::string& rpc) {
  if (!control_token_.has_value()) return true;
  std::optional<std::string> authorization;
  const auto& metadata = context->client_metadata();
  auto found = metadata.find("authorization");
  if (found != metadata.end()) authorization.emplace(found->second.data(), found->second.size());
  const absl::Status allowed = CheckBearerToken(authorization, *control_token_, rpc);
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return false;
  }
  return true;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::RegisterWorker(
    grpc::CallbackServerContext* context, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleRegisterWorker(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::Heartbeat(grpc::CallbackServerContext* context,
                                                            const v1::HeartbeatRequest* request,
                                                            v1::HeartbeatResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleHeartbeat(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::Deregister(grpc::CallbackServerContext* context,
                                                             const v1::DeregisterRequest* request,
                                                             v1::DeregisterResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleDeregister(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::RegisterParameterServer(
    grpc::CallbackServerContext* context, const v1::RegisterParameterServerRequest* request,
    v1::RegisterParameterServerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleRegisterParameterServer(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::PublishRendezvous(
    grpc::CallbackServerContext* context, const v1::PublishRendezvousRequest* request,
    v1::PublishRendezvousResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandlePublishRendezvous(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::WaitRendezvous(
    grpc::CallbackServerContext* context, const v1::WaitRendezvousRequest* request,
    v1::WaitRendezvousResponse* response) {
  auto* reactor = new WaitReactor(handler_);
  reactor->Start(*request, response);
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::SubmitJob(grpc::CallbackServerContext* context,
                                                            const v1::SubmitJobRequest* request,
                                                            v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Authorized(context, reactor, "SubmitJob")) return reactor;
  handler_->HandleSubmitJob(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::GetJob(grpc::CallbackServerContext* context,
                                                         const v1::GetJobRequest* request,
                                                         v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleGetJob(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::ListJobs(grpc::CallbackServerContext* context,
                                                           const v1::ListJobsRequest* request,
                                                           v1::ListJobsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleListJobs(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::PauseJob(grpc::CallbackServerContext* context,
                                                           const v1::JobControlRequest* request,
                                                           v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Authorized(context, reactor, "PauseJob")) return reactor;
  handler_->HandlePauseJob(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::ResumeJob(grpc::CallbackServerContext* context,
                                                            const v1::JobControlRequest* request,
                                                            v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Authorized(context, reactor, "ResumeJob")) return reactor;
  handler_->HandleResumeJob(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::StopJob(grpc::CallbackServerContext* context,
                                                          const v1::JobControlRequest* request,
                                                          v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Authorized(context, reactor, "StopJob")) return reactor;
  handler_->HandleStopJob(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::ListWorkers(grpc::CallbackServerContext* context,
                                                              const v1::ListWorkersRequest* request,
                                                              v1::ListWorkersResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleListWorkers(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::GetClusterStatus(
    grpc::CallbackServerContext* context, const v1::GetClusterStatusRequest* request,
    v1::ClusterStatus* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleGetClusterStatus(*request, response, FinishWith(reactor));
  return reactor;
}

}  // namespace tributary::coordinator
