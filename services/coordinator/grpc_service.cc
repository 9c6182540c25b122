#include "services/coordinator/grpc_service.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
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

// UploadModel: reads the header and the chunks into a ModelStore upload, one message
// at a time, and answers once the client half-closes.
class UploadReactor : public grpc::ServerReadReactor<v1::UploadModelRequest> {
 public:
  // `open` ends the stream past its deadlines (UploadLimits), with DEADLINE_EXCEEDED
  // saying which.
  UploadReactor(std::unique_ptr<ModelStore::Upload> upload, v1::UploadModelResponse* response,
                grpc::CallbackServerContext* context, StreamDeadlines* open)
      : upload_(std::move(upload)), response_(response), context_(context), open_(open) {
    open_->Add(this, context_, [this](const std::string& why) {
      FinishOnce(grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat(why, " (--upload_timeout, --upload_idle_timeout): upload again")));
    });
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) {  // Ended past its deadline: its slot and bytes go now.
        upload_.reset();
        return;
      }
    }
    if (!ok && context_->IsCancelled()) {
      upload_.reset();  // Its slot and what it sent go now.
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                              "UploadModel: cancelled before the file was complete"));
      return;
    }
    open_->Touch(this);
    if (!ok) {  // The client half-closed: the file is complete (or cut short).
      absl::StatusOr<v1::UploadModelResponse> finished = upload_->Finish();
      if (finished.ok()) *response_ = *std::move(finished);
      FinishOnce(ToGrpcStatus(finished.status()));
      return;
    }
    absl::Status taken;
    if (request_.has_header()) {
      taken = upload_->Header(request_.header());
    } else if (request_.payload_case() == v1::UploadModelRequest::kChunk) {
      taken = upload_->Chunk(request_.chunk());
    } else {
      taken = absl::InvalidArgumentError("UploadModel: a message with neither header nor chunk");
    }
    if (!taken.ok()) {
      FinishOnce(ToGrpcStatus(taken));
      return;
    }
    request_.Clear();
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;  // Ended past its deadline meanwhile: no more reads.
    }
    StartRead(&request_);
  }

  void OnDone() override {
    open_->Remove(this);
    delete this;
  }

 private:
  // The stream's one Finish: from a reaction, or from the deadline check's thread.
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<ModelStore::Upload> upload_;
  v1::UploadModelResponse* response_;
  grpc::CallbackServerContext* const context_;
  StreamDeadlines* const open_;
  v1::UploadModelRequest request_;
};

const RealClock kRealClock;

// FetchModel: writes a stored file in 1 MiB chunks, one write in flight at a time.
class FetchReactor : public grpc::ServerWriteReactor<v1::ModelChunk> {
 public:
  explicit FetchReactor(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "FetchModel: the client went away"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  static constexpr size_t kChunkBytes = 1 << 20;

  void WriteNext() {
    if (offset_ >= bytes_->size()) {
      Finish(grpc::Status::OK);
      return;
    }
    const size_t n = std::min(kChunkBytes, bytes_->size() - offset_);
    chunk_.set_offset(offset_);
    chunk_.set_size_bytes(bytes_->size());
    chunk_.set_data(bytes_->data() + offset_, n);
    offset_ += n;
    StartWrite(&chunk_);
  }

  std::shared_ptr<const std::string> bytes_;
  size_t offset_ = 0;
  v1::ModelChunk chunk_;
};

// A streaming call refused before it starts.
template <typename Reactor>
class RefusedReactor : public Reactor {
 public:
  explicit RefusedReactor(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

CoordinatorGrpcService::CoordinatorGrpcService(CoordinatorHandler* handler,
                                               std::optional<std::string> control_token,
                                               ModelStore* models,
                                               std::shared_ptr<const ClusterAuth> auth,
                                               std::shared_ptr<const CredentialIssuer> issuer,
                                               UploadLimits upload_limits, const Clock* clock)
    : handler_(handler),
      control_token_(std::move(control_token)),
      models_(models),
      auth_(std::move(auth)),
      issuer_(std::move(issuer)),
      uploads_("UploadModel", clock != nullptr ? clock : &kRealClock, upload_limits.total,
               upload_limits.idle) {}

bool CoordinatorGrpcService::CallerIs(grpc::CallbackServerContext* context,
                                      grpc::ServerUnaryReactor* reactor, RoleSet roles,
                                      const char* rpc) const {
  const absl::Status allowed = Authorize(auth_.get(), *context, roles, rpc);
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return false;
  }
  return true;
}

bool CoordinatorGrpcService::CallerIsWorker(grpc::CallbackServerContext* context,
                                            grpc::ServerUnaryReactor* reactor,
                                            const std::string& worker_id, const char* rpc) const {
  if (!CallerIs(context, reactor, OnlyRole(Role::kWorker), rpc)) return false;
  if (auth_ == nullptr) return true;
  const absl::Status own =
      issuer_ == nullptr
          ? absl::PermissionDeniedError(absl::StrCat(rpc, ": this coordinator issues no worker "
                                                          "credentials"))
          : issuer_->CheckWorker(
                MetadataValue(context->client_metadata(), kWorkerCredentialMetadata), worker_id,
                rpc);
  if (!own.ok()) reactor->Finish(ToGrpcStatus(own));
  return own.ok();
}

absl::Status CoordinatorGrpcService::CheckToken(grpc::CallbackServerContext* context,
                                                const std::string& rpc) const {
  if (!control_token_.has_value()) return absl::OkStatus();
  std::optional<std::string> authorization;
  const auto& metadata = context->client_metadata();
  auto found = metadata.find("authorization");
  if (found != metadata.end()) authorization.emplace(found->second.data(), found->second.size());
  return CheckBearerToken(authorization, *control_token_, rpc);
}

bool CoordinatorGrpcService::Authorized(grpc::CallbackServerContext* context,
                                        grpc::ServerUnaryReactor* reactor, const std::string& rpc) {
  const absl::Status allowed = CheckToken(context, rpc);
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return false;
  }
  return true;
}

grpc::ServerReadReactor<v1::UploadModelRequest>* CoordinatorGrpcService::UploadModel(
    grpc::CallbackServerContext* context, v1::UploadModelResponse* response) {
  using Refused = RefusedReactor<grpc::ServerReadReactor<v1::UploadModelRequest>>;
  if (models_ == nullptr) {
    return new Refused(absl::UnimplementedError("this coordinator stores no model files"));
  }
  if (absl::Status allowed = CheckToken(context, "UploadModel"); !allowed.ok()) {
    return new Refused(allowed);
  }
  absl::StatusOr<std::unique_ptr<ModelStore::Upload>> upload = models_->StartUpload();
  if (!upload.ok()) return new Refused(upload.status());
  return new UploadReactor(*std::move(upload), response, context, &uploads_);
}

grpc::ServerWriteReactor<v1::ModelChunk>* CoordinatorGrpcService::FetchModel(
    grpc::CallbackServerContext* context, const v1::FetchModelRequest* request) {
  using Refused = RefusedReactor<grpc::ServerWriteReactor<v1::ModelChunk>>;
  if (models_ == nullptr) {
    return new Refused(absl::UnimplementedError("this coordinator stores no model files"));
  }
  if (absl::Status allowed = Authorize(auth_.get(), *context,
                                       Role::kWorker | Role::kOperator, "FetchModel");
      !allowed.ok()) {
    return new Refused(allowed);
  }
  if (!IsSha256Hex(request->sha256())) {
    return new Refused(
        absl::InvalidArgumentError("FetchModel: sha256 must be 64 lowercase hex digits"));
  }
  absl::StatusOr<std::shared_ptr<const std::string>> bytes = models_->Read(request->sha256());
  if (!bytes.ok()) return new Refused(bytes.status());
  return new FetchReactor(*std::move(bytes));
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::RegisterWorker(
    grpc::CallbackServerContext* context, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!CallerIs(context, reactor, OnlyRole(Role::kWorker), "RegisterWorker")) return reactor;
  handler_->HandleRegisterWorker(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::Heartbeat(grpc::CallbackServerContext* context,
                                                            const v1::HeartbeatRequest* request,
                                                            v1::HeartbeatResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!CallerIsWorker(context, reactor, request->worker_id(), "Heartbeat")) return reactor;
  handler_->HandleHeartbeat(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::Deregister(grpc::CallbackServerContext* context,
                                                             const v1::DeregisterRequest* request,
                                                             v1::DeregisterResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!CallerIsWorker(context, reactor, request->worker_id(), "Deregister")) return reactor;
  handler_->HandleDeregister(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::RegisterParameterServer(
    grpc::CallbackServerContext* context, const v1::RegisterParameterServerRequest* request,
    v1::RegisterParameterServerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!CallerIs(context, reactor, OnlyRole(Role::kParameterServer), "RegisterParameterServer")) {
    return reactor;
  }
  handler_->HandleRegisterParameterServer(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::PublishRendezvous(
    grpc::CallbackServerContext* context, const v1::PublishRendezvousRequest* request,
    v1::PublishRendezvousResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!CallerIs(context, reactor, OnlyRole(Role::kWorker), "PublishRendezvous")) return reactor;
  handler_->HandlePublishRendezvous(*request, response, FinishWith(reactor));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::WaitRendezvous(
    grpc::CallbackServerContext* context, const v1::WaitRendezvousRequest* request,
    v1::WaitRendezvousResponse* response) {
  if (absl::Status allowed = Authorize(auth_.get(), *context,
                                       OnlyRole(Role::kWorker), "WaitRendezvous");
      !allowed.ok()) {
    grpc::ServerUnaryReactor* refused = context->DefaultReactor();
    refused->Finish(ToGrpcStatus(allowed));
    return refused;
  }
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

grpc::ServerUnaryReactor* CoordinatorGrpcService::GetJobHistory(
    grpc::CallbackServerContext* context, const v1::GetJobHistoryRequest* request,
    v1::JobHistory* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  handler_->HandleGetJobHistory(*request, response, FinishWith(reactor));
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
  if (!CallerIs(context, reactor, Role::kOperator | Role::kCoordinator, "ListWorkers")) {
    return reactor;
  }
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
