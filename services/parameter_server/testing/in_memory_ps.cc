#include "services/parameter_server/testing/in_memory_ps.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire_dtype.h"

namespace tributary::ps::testing {

// The shard calls these with its locks held: they only copy and signal.
class InMemoryPsConnection::Sink : public NodeSink {
 public:
  explicit Sink(InMemoryPsConnection* owner) : owner_(owner) {}
  void Deliver(std::shared_ptr<const v1::PartitionValues> values) override {
    owner_->Delivered(std::move(values));
  }
  void Retry(uint32_t partition_id) override { owner_->Retry(partition_id); }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&owner_->mu_);
    if (owner_->failure_.ok()) owner_->failure_ = status;
  }

 private:
  InMemoryPsConnection* owner_;
};

InMemoryPsConnection::InMemoryPsConnection(std::vector<ParameterShard*> shards,
                                           worker::PsIdentity identity, v1::PartitionPlan plan,
                                           v1::TrainingMode mode, v1::DType wire_dtype)
    : shards_(std::move(shards)),
      identity_(std::move(identity)),
      plan_(std::move(plan)),
      mode_(mode),
      wire_dtype_(wire_dtype) {
  for (size_t i = 0; i < shards_.size(); ++i) sinks_.push_back(std::make_unique<Sink>(this));
  absl::MutexLock lock(&mu_);
  partitions_.resize(plan_.partitions_size());
  retry_thread_ = std::thread([this] { RetryLoop(); });
}

InMemoryPsConnection::~InMemoryPsConnection() { Close(); }

absl::StatusOr<uint64_t> InMemoryPsConnection::InitPartitions(const v1::JobSpec& spec,
                                                              uint64_t total_steps,
                                                              const float* params) {
  uint64_t lowest = UINT64_MAX;
  for (size_t index = 0; index < shards_.size(); ++index) {
    v1::InitHeader header;
    header.set_job_id(identity_.job_id);
    *header.mutable_job() = spec;
    *header.mutable_plan() = plan_;
    header.set_shard_index(static_cast<uint32_t>(index));
    header.set_total_steps(total_steps);
    header.set_generation(identity_.generation);
    header.set_num_nodes(identity_.num_nodes);
    header.set_resume_step(identity_.resume_step);
    std::vector<v1::PartitionValues> values;
    for (const v1::Partition& partition : plan_.partitions()) {
      if (partition.shard() != index) continue;
      v1::PartitionValues& initial = values.emplace_back();
      initial.set_partition_id(partition.id());
      initial.set_dtype(v1::FLOAT32);
      initial.set_data(reinterpret_cast<const char*>(params + partition.offset()),
                       partition.length() * sizeof(float));
    }
    absl::StatusOr<v1::InitPartitionsResponse> installed =
        shards_[index]->Init(header, std::move(values));
    if (!installed.ok()) return installed.status();
    lowest = std::min(lowest, installed->step());
  }
  return lowest == UINT64_MAX ? 0 : lowest;
}

absl::StatusOr<uint64_t> InMemoryPsConnection::PullAll(float* params) {
  uint64_t lowest = UINT64_MAX;
  for (ParameterShard* shard : shards_) {
    v1::PullRequest request;
    request.set_job_id(identity_.job_id);
    auto values = shard->Pull(request);
    if (!values.ok()) return values.status();
    for (const auto& partition_values : *values) {
      const v1::Partition& partition = plan_.partitions(partition_values->partition_id());
      std::memcpy(params + partition.offset(), partition_values->data().data(),
                  partition_values->data().size());
      bytes_pulled_ += partition_values->data().size();
      lowest = std::min(lowest, partition_values->step());
    }
  }
  return lowest == UINT64_MAX ? 0 : lowest;
}

absl::Status InMemoryPsConnection::Open() { return absl::OkStatus(); }

absl::Status InMemoryPsConnection::Push(uint64_t step, uint32_t partition, const float* data,
                                        uint64_t sample_count, uint32_t steps) {
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    PartitionState& state = partitions_[partition];
    state.awaiting = true;
    state.step = step;
    state.data = data;
    state.samples = sample_count;
    state.steps = steps;
    state.landed_at = nullptr;
  }
  return PushNow(partition);
}

absl::Status InMemoryPsConnection::PushNow(uint32_t partition) {
  const v1::Partition& spec = plan_.partitions(partition);
  v1::GradientPush push;
  {
    absl::MutexLock lock(&mu_);
    const PartitionState& state = partitions_[partition];
    push.set_step(state.step);
    push.set_steps(state.steps);
    push.set_sample_count(state.samples);
    const v1::DType dtype = PartitionDtype(spec.buffers(), wire_dtype_);
    push.set_dtype(dtype);
    std::string data(spec.length() * WireBytes(dtype), '\0');
    NarrowInto(dtype, state.data, spec.length(), data.data());
    push.set_data(std::move(data));
  }
  push.set_job_id(identity_.job_id);
  push.set_generation(identity_.generation);
  push.set_node_rank(identity_.node_rank);
  push.set_partition_id(partition);
  bytes_pushed_ += push.data().size();
  absl::StatusOr<PushResult> result = shards_[spec.shard()]->Push(push, sinks_[spec.shard()].get());
  if (!result.ok()) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = result.status();
    return result.status();
  }
  return absl::OkStatus();
}

void InMemoryPsConnection::ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) {
  if (mode_ != v1::SYNC || partition >= static_cast<uint32_t>(plan_.partitions_size())) return;
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return;
  partitions_[partition].expect_dst = dst;
  partitions_[partition].expect_step = step;
}

void InMemoryPsConnection::Delivered(std::shared_ptr<const v1::PartitionValues> values) {
  bytes_pulled_ += values->data().size();
  const uint32_t partition = values->partition_id();
  uint64_t landed_step;
  {
    absl::MutexLock lock(&mu_);
    PartitionState& state = partitions_[partition];
    // SYNC, LOCAL_SGD: the update of our step (round); a re-sent older one does not
    // count. ASYNC, BOUNDED_STALENESS: any.
    const bool independent = mode_ == v1::ASYNC || mode_ == v1::BOUNDED_STALENESS;
    const bool awaited = state.awaiting && values->step() > state.step;
    if (independent || values->step() > state.step) state.awaiting = false;
    state.latest = std::move(values);
    // The awaited update of an expected destination lands there (PsClient's Claim).
    const std::string& data = state.latest->data();
    if (!awaited || state.expect_dst == nullptr || state.expect_step != state.step ||
        state.latest->dtype() != v1::FLOAT32 ||
        data.size() != plan_.partitions(partition).length() * sizeof(float)) {
      return;
    }
    std::memcpy(state.expect_dst, data.data(), data.size());
    state.landed_at = state.expect_dst;
    state.expect_dst = nullptr;
    landed_step = state.step;
  }
  if (landed_listener_) landed_listener_(partition, landed_step);
}

void InMemoryPsConnection::Retry(uint32_t partition) {
  absl::MutexLock lock(&mu_);
  retries_.push_back(partition);
}

void InMemoryPsConnection::RetryLoop() {
  while (true) {
    uint32_t partition;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ || !retries_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (closing_) return;
      partition = retries_.front();
      retries_.pop_front();
    }
    PushNow(partition).IgnoreError();  // A failure is sticky and ends the waits.
  }
}

absl::Status InMemoryPsConnection::WaitUpdated(uint32_t partition, uint64_t step,
                                               absl::Duration timeout, float* dst) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failure_.ok() || !partitions_[partition].awaiting ||
           partitions_[partition].step != step;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("no update of partition ", partition,
                                                    " for step ", step, " within ",
                                                    absl::FormatDuration(timeout)));
  }
  // An update that arrived counts, even after an interruption or a later failure.
  const PartitionState& state = partitions_[partition];
  if (state.awaiting && state.step == step) return failure_;
  if (state.landed_at != nullptr) {  // Copied into the expected destination already.
    if (state.landed_at != dst) {
      std::memcpy(dst, state.landed_at, plan_.partitions(partition).length() * sizeof(float));
    }
    return absl::OkStatus();
  }
  if (state.latest == nullptr) {
    return absl::InternalError(
        absl::StrCat("partition ", partition, ": no values delivered for step ", step));
  }
  std::memcpy(dst, state.latest->data().data(), state.latest->data().size());
  return absl::OkStatus();
}

void InMemoryPsConnection::Interrupt(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = absl::AbortedError(reason);
  for (PartitionState& state : partitions_) state.expect_dst = nullptr;
}

void InMemoryPsConnection::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    if (failure_.ok()) failure_ = absl::CancelledError("PS connection closed");
  }
  for (size_t i = 0; i < shards_.size(); ++i) shards_[i]->Detach(sinks_[i].get());
  retry_thread_.join();
}

}  // namespace tributary::ps::testing
