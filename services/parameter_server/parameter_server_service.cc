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
#include "services/parameter_server/push_book.h"

namespace tributary::ps {
namespace {

// One PushPull stream: the node's pushes go up, parameter values come down, both as
// raw messages (common/partition_codec.h): a push is summed from the slices it
// arrived in, and values go out as a slice over the shard's buffer.
//
// Concurrency: gRPC calls the On* reactions, executor lanes run the pushes, and the
// shard calls the NodeSink methods (with its own locks held). All state is under
// mu_. gRPC operations are decided under mu_ and started after releasing it
// (Finish may run OnDone inline), Finish last. The reactor deletes itself once gRPC
// is done with it (OnDone) and no executor task refers to it any more.
class PushPullReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                              public NodeSink {
 public:
  // With `credentials` (a shard serving with cluster credentials), every push must
  // claim the node whose credential the stream presented (x-tributary-node): the first
  // push binds the stream to its (job, generation, node rank), and a push claiming
  // another ends the stream.
  PushPullReactor(ParameterShard* shard, PartitionExecutor* executor,
                  grpc::CallbackServerContext* context, const NodeCredentialBook* credentials)
      : shard_(shard),
        executor_(executor),
        context_(context),
        credentials_(credentials),
        node_credential_(credentials == nullptr
                             ? std::string()
                             : MetadataValue(context->client_metadata(), kNodeCredentialMetadata)) {
    for (Slot& slot : slots_) book_.Free(&slot);
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      PlanLocked(actions);
    }
    Act(actions);
  }

  void OnReadDone(bool ok) override {
    Actions actions;
    Slot* push = nullptr;
    {
      absl::MutexLock lock(&mu_);
      Slot* slot = reading_slot_;
      reading_ = false;
      reading_slot_ = nullptr;
      if (!ok) {
        read_closed_ = true;  // The client half-closed, or the call is gone.
        if (context_->IsCancelled())
          EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
        book_.Free(slot);
      } else if (ending()) {
        book_.Free(slot);
      } else if (absl::Status decoded = slot->Decode(); !decoded.ok()) {
        EndLocked(ToGrpcStatus(decoded));
        book_.Free(slot);
      } else if (absl::Status bound = BindLocked(slot->push); !bound.ok()) {
        EndLocked(ToGrpcStatus(bound));
        book_.Free(slot);
      } else {
        push = slot;
        ++tasks_;
      }
      PlanLocked(actions);
    }
    if (push != nullptr) Schedule(push);
    Act(actions);
  }

  void OnWriteDone(bool ok) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      writes_.pop_front();
      if (!ok) {
        EndLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "PushPull: the stream broke"));
      }
      PlanLocked(actions);
    }
    Act(actions);
  }

  void OnCancel() override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      PlanLocked(actions);
    }
    Act(actions);
  }

  void OnDone() override {
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      destroy = tasks_ == 0;
    }
    if (destroy) Destroy();
  }

  // NodeSink -----------------------------------------------------------------------

  void Deliver(std::shared_ptr<const v1::PartitionValues> values) override {
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      if (ending() || done_) return;
      book_.Delivered(values->partition_id(), values->step());
      writes_.push_back(EncodePartitionValues(std::move(values)));
      PlanLocked(actions);
    }
    Act(actions);  // At most a StartWrite: never Finish while the shard's locks are held.
  }

  void Retry(uint32_t partition_id) override {
    Slot* push;
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      push = book_.TakeHeld(partition_id, ending());
      if (push == nullptr) return;
      ++tasks_;
    }
    Schedule(push);
  }

  void End(const absl::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      if (ending() || done_) return;
      EndLocked(ToGrpcStatus(status));
      ++tasks_;  // Finish from an executor lane, not under the shard's locks.
    }
    executor_->Submit(reinterpret_cast<uintptr_t>(this), [this] { FinishTask(); });
  }

 private:
  static constexpr int kReadSlots = 2;  // One push being processed while the next arrives.

  // A push as read: the message, the slices it holds and the view into them.
  struct Slot {
    grpc::ByteBuffer message;
    ReceivedMessage received;
    GradientPushView push;

    absl::Status Decode() {
      absl::Status decoded = DecodeGradientPush(message, &received, &push);
      message.Clear();  // `received` holds the slices now.
      return decoded;
    }
  };

  // gRPC operations to start once mu_ is released.
  struct Actions {
    Slot* read = nullptr;
    const grpc::ByteBuffer* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // OK when no credential is needed or `push` claims the node this stream is bound to
  // (binding it on the first push).
  absl::Status BindLocked(const GradientPushView& push) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (credentials_ == nullptr) return absl::OkStatus();
    if (bound_.has_value()) {
      if (push.job_id == bound_->job_id && push.generation == bound_->generation &&
          push.node_rank == bound_->node_rank) {
        return absl::OkStatus();
      }
      return absl::PermissionDeniedError(absl::StrCat(
          "PushPull: this stream speaks for node ", bound_->node_rank, " of generation ",
          bound_->generation, " of job ", bound_->job_id, "; a push claimed node ",
          push.node_rank, " of generation ", push.generation, " of job ", push.job_id));
    }
    absl::Status checked = credentials_->Check(node_credential_, push.job_id, push.generation,
                                               push.node_rank, "PushPull");
    if (checked.ok()) bound_ = BoundNode{push.job_id, push.generation, push.node_rank};
    return checked;
  }

  bool ending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return end_status_.has_value() || finish_called_;
  }

  void EndLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending()) return;
    end_status_ = std::move(status);
    // Queued values are dropped; the one gRPC is sending must live until OnWriteDone.
    while (writes_.size() > (writing_ ? 1u : 0u)) writes_.pop_back();
  }

  void PlanLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_called_) return;
    if (!writing_ && !writes_.empty() && !end_status_.has_value()) {
      writing_ = true;
      actions.write = &writes_.front();
    }
    if (!reading_ && !read_closed_ && !end_status_.has_value() && book_.HasFree()) {
      reading_ = true;
      reading_slot_ = book_.TakeFree();
      actions.read = reading_slot_;
    }
    // A half-closed stream stays open until every push it made has its values.
    const bool drained =
        read_closed_ && tasks_ == 0 && book_.Answered() && writes_.empty();
    if (!writing_ && (end_status_.has_value() || drained)) {
      finish_called_ = true;
      actions.finish = end_status_.value_or(grpc::Status::OK);
    }
  }

  void Act(Actions& actions) {
    if (actions.write != nullptr) StartWrite(actions.write);
    if (actions.read != nullptr) StartRead(&actions.read->message);
    if (actions.finish.has_value()) Finish(*std::move(actions.finish));  // May delete `this`.
  }

  void Schedule(Slot* push) {
    executor_->Submit(push->push.partition_id, [this, push] { RunPush(push); });
  }

  void RunPush(Slot* push) {
    const GradientPushView& view = push->push;
    const uint32_t partition = view.partition_id;
    bool skip;
    {
      absl::MutexLock lock(&mu_);
      skip = ending();
      if (!skip) book_.Started(partition, view.step);
    }
    absl::StatusOr<PushResult> result = PushResult::kDuplicate;
    if (!skip) result = shard_->Push(view, this);
    Actions actions;
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      if (absl::Status refused = book_.Settle(push, partition, !skip, result); !refused.ok()) {
        EndLocked(ToGrpcStatus(refused));
      }
      --tasks_;
      PlanLocked(actions);
      destroy = done_ && tasks_ == 0;
    }
    if (destroy) {
      Destroy();
      return;
    }
    Act(actions);
  }

  void FinishTask() {
    Actions actions;
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      --tasks_;
      PlanLocked(actions);
      destroy = done_ && tasks_ == 0;
    }
    if (destroy) {
      Destroy();
      return;
    }
    Act(actions);
  }

  void Destroy() {
    shard_->Detach(this);  // After this no sink call can reach us.
    delete this;
  }

  ParameterShard* const shard_;
  PartitionExecutor* const executor_;
  grpc::CallbackServerContext* const context_;
  const NodeCredentialBook* const credentials_;
  const std::string node_credential_;

  struct BoundNode {
    std::string job_id;
    uint64_t generation;
    uint32_t node_rank;
  };

  absl::Mutex mu_;
  std::optional<BoundNode> bound_ ABSL_GUARDED_BY(mu_);
  Slot slots_[kReadSlots];
  PushBook<Slot> book_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  Slot* reading_slot_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  int tasks_ ABSL_GUARDED_BY(mu_) = 0;  // Executor tasks that still refer to `this`.
  // Encoded values (each holds its PartitionValues until gRPC has sent it).
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> end_status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

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
  return new PushPullReactor(shard_, executor_, context, NodeCredentials());
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
