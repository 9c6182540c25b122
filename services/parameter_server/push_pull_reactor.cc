#include "services/parameter_server/push_pull_reactor.h"

#include <glog/logging.h>

#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster_auth.h"
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
    EndTask([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Under mu_ (EndTask).
      if (absl::Status refused = book_.Settle(push, partition, !skip, result); !refused.ok()) {
        EndLocked(ToGrpcStatus(refused));
      }
    });
  }

  void FinishTask() {
    EndTask([] {});
  }

  // An executor task that referred to `this` ends: `settle` runs under mu_ first; then
  // the reactor is destroyed when gRPC is done with it and this was the last task, or
  // what is due now is started.
  void EndTask(absl::FunctionRef<void()> settle) {
    Actions actions;
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      settle();
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

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewPushPullReactor(
    ParameterShard* shard, PartitionExecutor* executor, grpc::CallbackServerContext* context,
    const NodeCredentialBook* credentials) {
  return new PushPullReactor(shard, executor, context, credentials);
}

}  // namespace tributary::ps
