#include "services/parameter_server/parameter_server_service.h"

#include <malloc.h>

#include <glog/logging.h>

#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/partition_codec.h"
#include "services/parameter_server/push_pull_reactor.h"

namespace tributary::ps {
namespace {

const RealClock kRealClock;

// InitPartitions: header, then one message per owned partition.
class InitReactor final : public grpc::ServerReadReactor<v1::InitPartitionsRequest> {
 public:
  // With `credentials`, the header must name the node whose credential the stream
  // presented, and the node count the coordinator gave its generation.
  // `open` lists the open streams (ParameterServerService::ExpireStalledInits).
  InitReactor(ParameterShard* shard, PartitionExecutor* control,
              grpc::CallbackServerContext* context, v1::InitPartitionsResponse* response,
              const NodeCredentialBook* credentials, std::string node_credential,
              StreamDeadlines* open)
      : control_(control),
        context_(context),
        response_(response),
        credentials_(credentials),
        node_credential_(std::move(node_credential)),
        open_(open),
        session_(shard->StartInit()) {
    open_->Add(this, context_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok && context_->IsCancelled()) {
      // The caller went away (or the stream expired): nothing to install. Free the
      // values now, and give large ones back to the system (the PS's malloc keeps up
      // to 1 GiB of freed memory otherwise: malloc_tuning.h).
      FreeSession();
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "InitPartitions: cancelled before every value arrived"));
      return;
    }
    if (!ok) {
      // All values are in: install on the control lane (it waits for in-flight pushes).
      control_->Submit(0, [this] {
        absl::StatusOr<v1::InitPartitionsResponse> result = session_->Finish();
        if (result.ok()) *response_ = *std::move(result);
        Finish(ToGrpcStatus(result.status()));
      });
      return;
    }
    absl::Status status;
    switch (request_.payload_case()) {
      case v1::InitPartitionsRequest::kHeader:
        if (credentials_ != nullptr) {
          const v1::InitHeader& header = request_.header();
          status = credentials_->Check(node_credential_, header.job_id(), header.generation(),
                                       header.node_rank(), "InitPartitions");
          const uint32_t nodes = credentials_->NumNodes(header.job_id(), header.generation());
          if (status.ok() && header.num_nodes() != nodes) {
            status = absl::InvalidArgumentError(absl::StrCat(
                "InitPartitions: num_nodes ", header.num_nodes(), " but generation ",
                header.generation(), " of job ", header.job_id(), " has ", nodes, " nodes"));
          }
        }
        if (status.ok()) status = session_->Header(request_.header());
        break;
      case v1::InitPartitionsRequest::kInitial:
        status = session_->Values(*request_.mutable_initial());
        break;
      default:
        status =
            absl::InvalidArgumentError("InitPartitions: a message with neither header nor values");
    }
    if (!status.ok()) {
      FreeSession();
      Finish(ToGrpcStatus(status));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    open_->Remove(this);
    delete this;
  }

 private:
  void FreeSession() {
    const size_t held = session_->buffered_bytes();
    session_.reset();
    if (held >= (size_t{16} << 20)) malloc_trim(0);
  }

  PartitionExecutor* control_;
  grpc::CallbackServerContext* const context_;
  v1::InitPartitionsResponse* response_;
  const NodeCredentialBook* const credentials_;
  const std::string node_credential_;
  StreamDeadlines* const open_;
  std::unique_ptr<ParameterShard::InitSession> session_;
  v1::InitPartitionsRequest request_;
};

class PullReactor final : public grpc::ServerWriteReactor<v1::PartitionValues> {
 public:
  PullReactor(ParameterShard* shard, const v1::PullRequest& request) : shard_(shard) {
    auto values = shard->Pull(request);
    if (!values.ok()) {
      Finish(ToGrpcStatus(values.status()));
      return;
    }
    values_ = *std::move(values);
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Pull: the stream broke"));
      return;
    }
    shard_->RecordPulledBytes(values_[index_]->data().size());
    ++index_;
    Next();
  }

  void OnDone() override { delete this; }

 private:
  void Next() {
    if (index_ < values_.size()) {
      StartWrite(values_[index_].get());
    } else {
      Finish(grpc::Status::OK);
    }
  }

  ParameterShard* shard_;
  std::vector<std::shared_ptr<const v1::PartitionValues>> values_;
  size_t index_ = 0;
};

// A streaming call refused before it starts.
template <typename Reactor>
class RefusedReactor final : public Reactor {
 public:
  explicit RefusedReactor(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// A unary call's reactor already finished with `status`.
grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

const NodeCredentialBook* ParameterServerService::NodeCredentials() const {
  return auth_ == nullptr ? nullptr : &node_credentials_;
}

ParameterServerService::ParameterServerService(ParameterShard* shard, PartitionExecutor* executor,
                                               std::shared_ptr<const ClusterAuth> auth,
                                               absl::Duration init_timeout, const Clock* clock)
    : shard_(shard),
      executor_(executor),
      auth_(std::move(auth)),
      open_inits_("InitPartitions", clock != nullptr ? clock : &kRealClock, init_timeout,
                  absl::InfiniteDuration()) {}

ParameterServerService::~ParameterServerService() = default;

grpc::ServerReadReactor<v1::InitPartitionsRequest>* ParameterServerService::InitPartitions(
    grpc::CallbackServerContext* context, v1::InitPartitionsResponse* response) {
  if (absl::Status allowed = Authorize(auth_.get(), *context,
                                       OnlyRole(Role::kWorker), "InitPartitions");
      !allowed.ok()) {
    return new RefusedReactor<grpc::ServerReadReactor<v1::InitPartitionsRequest>>(allowed);
  }
  return new InitReactor(
      shard_, &control_, context, response, NodeCredentials(),
      auth_ == nullptr ? "" : MetadataValue(context->client_metadata(), kNodeCredentialMetadata),
      &open_inits_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ParameterServerService::PushPull(
    grpc::CallbackServerContext* context) {
  if (absl::Status allowed =
          Authorize(auth_.get(), *context, OnlyRole(Role::kWorker), "PushPull");
      !allowed.ok()) {
    return new RefusedReactor<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(
        allowed);
  }
  return NewPushPullReactor(shard_, executor_, context, NodeCredentials());
}

grpc::ServerWriteReactor<v1::PartitionValues>* ParameterServerService::Pull(
    grpc::CallbackServerContext* context, const v1::PullRequest* request) {
  if (absl::Status allowed =
          Authorize(auth_.get(), *context,
                    Role::kWorker | Role::kCoordinator | Role::kOperator, "Pull");
      !allowed.ok()) {
    return new RefusedReactor<grpc::ServerWriteReactor<v1::PartitionValues>>(allowed);
  }
  return new PullReactor(shard_, *request);
}

grpc::ServerUnaryReactor* ParameterServerService::GetShardStatus(
    grpc::CallbackServerContext* context, const v1::GetShardStatusRequest* /*request*/,
    v1::ShardStatus* response) {
  if (absl::Status allowed = Authorize(auth_.get(), *context,
                                       Role::kCoordinator | Role::kOperator, "GetShardStatus");
      !allowed.ok()) {
    return Refuse(context, allowed);
  }
  *response = shard_->Status();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

// The control calls that run on the control lane (they write files or wait for a job
// to install): who may make each, and what of the shard answers it.
template <typename Request, typename Response>
struct ControlCall {
  const char* name;
  RoleSet roles;
  absl::StatusOr<Response> (*run)(ParameterShard& shard, const Request& request);
};

namespace {

constexpr ControlCall<v1::CheckpointRequest, v1::CheckpointResponse> kCheckpointCall{
    "Checkpoint", Role::kCoordinator | Role::kOperator,
    [](ParameterShard& shard, const v1::CheckpointRequest&) { return shard.Checkpoint(); }};
constexpr ControlCall<v1::BeginGenerationRequest, v1::BeginGenerationResponse> kBeginCall{
    "BeginGeneration", OnlyRole(Role::kCoordinator),
    [](ParameterShard& shard, const v1::BeginGenerationRequest& request) {
      return shard.BeginGeneration(request);
    }};
constexpr ControlCall<v1::EndJobRequest, v1::EndJobResponse> kEndJobCall{
    "EndJob", OnlyRole(Role::kCoordinator),
    [](ParameterShard& shard, const v1::EndJobRequest& request) { return shard.EndJob(request); }};
constexpr ControlCall<v1::RestoreJobRequest, v1::RestoreJobResponse> kRestoreJobCall{
    "RestoreJob", OnlyRole(Role::kCoordinator),
    [](ParameterShard& shard, const v1::RestoreJobRequest& request) {
      return shard.RestoreJob(request);
    }};

}  // namespace

template <typename Request, typename Response>
grpc::ServerUnaryReactor* ParameterServerService::Control(
    grpc::CallbackServerContext* context, const Request* request, Response* response,
    const ControlCall<Request, Response>& call, absl::FunctionRef<absl::Status()> admit) {
  if (absl::Status allowed = Authorize(auth_.get(), *context, call.roles, call.name);
      !allowed.ok()) {
    return Refuse(context, allowed);
  }
  if (absl::Status admitted = admit(); !admitted.ok()) return Refuse(context, admitted);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  control_.Submit(0, [this, reactor, request, response, run = call.run] {
    absl::StatusOr<Response> result = run(*shard_, *request);
    if (result.ok()) *response = *std::move(result);
    reactor->Finish(ToGrpcStatus(result.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Checkpoint(
    grpc::CallbackServerContext* context, const v1::CheckpointRequest* request,
    v1::CheckpointResponse* response) {
  return Control(context, request, response, kCheckpointCall);
}

grpc::ServerUnaryReactor* ParameterServerService::BeginGeneration(
    grpc::CallbackServerContext* context, const v1::BeginGenerationRequest* request,
    v1::BeginGenerationResponse* response) {
  return Control(context, request, response, kBeginCall, [&] {
    // Noted first: a shard that holds no job yet refuses, and the workers'
    // InitPartitions installs the job at this generation with these credentials.
    return auth_ == nullptr ? absl::OkStatus() : node_credentials_.Note(*request);
  });
}

grpc::ServerUnaryReactor* ParameterServerService::EndJob(grpc::CallbackServerContext* context,
                                                         const v1::EndJobRequest* request,
                                                         v1::EndJobResponse* response) {
  return Control(context, request, response, kEndJobCall);
}

grpc::ServerUnaryReactor* ParameterServerService::RestoreJob(
    grpc::CallbackServerContext* context, const v1::RestoreJobRequest* request,
    v1::RestoreJobResponse* response) {
  return Control(context, request, response, kRestoreJobCall);
}

grpc::ServerUnaryReactor* ParameterServerService::OpenDataPlane(
    grpc::CallbackServerContext* context, const v1::OpenDataPlaneRequest* request,
    v1::OpenDataPlaneResponse* response) {
  if (absl::Status allowed =
          Authorize(auth_.get(), *context, OnlyRole(Role::kWorker), "OpenDataPlane");
      !allowed.ok()) {
    return Refuse(context, allowed);
  }
  if (!IsJobId(request->job_id())) {
    return Refuse(context, absl::InvalidArgumentError(absl::StrCat(
                               "OpenDataPlane: job_id \"", request->job_id().substr(0, 160),
                               "\" is not 1-128 characters of [A-Za-z0-9._-]")));
  }
  if (auth_ != nullptr) {
    if (absl::Status checked = node_credentials_.Check(
            MetadataValue(context->client_metadata(), kNodeCredentialMetadata),
            request->job_id(), request->generation(), request->node_rank(), "OpenDataPlane");
        !checked.ok()) {
      return Refuse(context, checked);
    }
  }
  // Tickets only for a node of the generation the shard runs now (whatever the caller
  // holds): the ticket table is not for anyone to fill.
  if (absl::Status node =
          shard_->CheckNode(request->job_id(), request->generation(), request->node_rank());
      !node.ok()) {
    return Refuse(context, absl::Status(node.code(),
                                        absl::StrCat("OpenDataPlane: ", node.message())));
  }
  if (data_plane_ == nullptr) {
    return Refuse(context, absl::FailedPreconditionError(
                               "OpenDataPlane: this shard runs no TCP data plane (--data_port=-1 "
                               "or TLS): use PushPull"));
  }
  absl::StatusOr<v1::OpenDataPlaneResponse> issued =
      data_plane_->Issue(request->job_id(), request->generation(), request->node_rank());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (issued.ok()) *response = *std::move(issued);
  reactor->Finish(ToGrpcStatus(issued.status()));
  return reactor;
}

}  // namespace tributary::ps
