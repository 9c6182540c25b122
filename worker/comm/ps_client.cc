#include "worker/comm/ps_client.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/data_plane_wire.h"
#include "common/wire_dtype.h"

namespace tributary::worker {

absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name) {
  if (name == "auto") return PsTransport::kAuto;
  if (name == "local") return PsTransport::kLocal;
  if (name == "tcp") return PsTransport::kTcp;
  if (name == "grpc") return PsTransport::kGrpc;
  return absl::InvalidArgumentError(
      absl::StrCat("--ps_transport=", name, ": expected auto, local, tcp or grpc"));
}

const char* PsTransportName(PsTransport transport) {
  switch (transport) {
    case PsTransport::kAuto: return "auto";
    case PsTransport::kLocal: return "local";
    case PsTransport::kTcp: return "tcp";
    case PsTransport::kGrpc: return "grpc";
  }
  return "?";
}

PsClient::PsClient(PsIdentity identity, v1::PartitionPlan plan, std::vector<v1::ShardInfo> shards,
                   ChannelOptions channel_options, v1::TrainingMode mode, v1::DType wire_dtype,
                   absl::Duration retry_budget, int streams_per_shard, PsTransport transport,
                   bool shared_memory, std::shared_ptr<SharedRegion> node_region)
    : identity_(std::move(identity)),
      plan_(std::move(plan)),
      channel_options_(std::move(channel_options)),
      mode_(mode),
      wire_dtype_(wire_dtype),
      retry_budget_(retry_budget),
      partitions_(plan_.partitions_size()) {
  LaneKeeper::Options lanes;
  lanes.transport = transport;
  lanes.streams_per_shard = std::max(1, streams_per_shard);
  lanes.retry_budget = retry_budget_;
  lanes.first_data_plane_retry = kDefaultDataPlaneRetry;
  lanes.max_data_plane_retry = kMaxDataPlaneRetry;
  lanes.channel_options = channel_options_;
  lanes.shared_memory = shared_memory;
  lanes.node_region = std::move(node_region);
  lanes.partition_bytes.assign(plan_.partitions_size(), 0);
  for (const v1::Partition& partition : plan_.partitions()) {
    const uint64_t bytes = static_cast<uint64_t>(partition.length()) * 4;  // FLOAT32 at most.
    lanes.max_values_frame = std::max<uint64_t>(lanes.max_values_frame, bytes);
    // Ids are 0..N-1 in a checked plan; any other id gets no shared slot.
    if (partition.id() < lanes.partition_bytes.size()) {
      lanes.partition_bytes[partition.id()] = bytes;
    }
  }
  lanes.max_values_frame += data_plane::kMessageOverheadBytes;
  for (const v1::ShardInfo& info : shards) {
    LaneKeeper::ShardLink& link = shards_.emplace_back();
    link.index = info.shard_index();
    link.address = info.address();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(info.address(), channel_options_);
    if (channel.ok()) {
      link.stub = stubs_.emplace_back(v1::ParameterServer::NewStub(*channel)).get();
    } else {
      LOG(ERROR) << "PS shard " << info.shard_index() << ": " << channel.status();
    }
    for (const v1::Partition& partition : plan_.partitions()) {
      if (partition.shard() == info.shard_index()) link.partitions.push_back(partition.id());
    }
  }
  LaneKeeper::Owner& owner = *this;
  DirectReceiver* direct = this;  // The TCP lanes' (they ask where an update may land).
  lanes_ = std::make_unique<LaneKeeper>(identity_, shards_, plan_.partitions_size(),
                                        std::move(lanes), owner, direct);
  if (WireBytes(wire_dtype_) < sizeof(float)) {
    narrowed_.resize(static_cast<size_t>(plan_.total_elements()) * WireBytes(wire_dtype_));
  }
}

PsClient::~PsClient() { Close(); }

ShardRef PsClient::RefOf(const LaneKeeper::ShardLink& shard) const {
  return ShardRef{shard.stub, shard.index,
                  absl::StrCat("PS shard ", shard.index, " at ", shard.address)};
}

void PsClient::FailLocked(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::Status PsClient::WithRetries(const std::function<absl::Status()>& attempt) {
  const absl::Time give_up = absl::Now() + retry_budget_;
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  for (int attempts = 1;; ++attempts) {
    absl::Status status = attempt();
    // Only UNAVAILABLE (the shard is not up, restarting, unreachable) is worth another
    // try: a refusal such as FAILED_PRECONDITION is the shard's answer.
    if (status.code() != absl::StatusCode::kUnavailable) return status;
    if (absl::Now() + backoff.Peek() > give_up) {
      return absl::UnavailableError(absl::StrCat(status.message(), " (gave up after ", attempts,
                                                 " attempt(s) in ",
                                                 absl::FormatDuration(retry_budget_), ")"));
    }
    ++rpc_retries_;
    LOG(WARNING) << status.message() << "; retry " << attempts << " in "
                 << absl::FormatDuration(backoff.Peek());
    absl::SleepFor(backoff.Next());
  }
}

absl::StatusOr<uint64_t> PsClient::InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                                  const float* params) {
  uint64_t lowest_step = ~uint64_t{0};
  for (const LaneKeeper::ShardLink& shard : shards_) {
    const ShardRef ref = RefOf(shard);
    if (ref.stub == nullptr) return absl::InvalidArgumentError(ref.name + ": no channel");
    uint64_t step = 0;
    absl::Status status = WithRetries([&]() -> absl::Status {
      absl::StatusOr<uint64_t> installed =
          InstallJob(ref, identity_, plan_, shard.partitions, spec, total_steps, params);
      if (!installed.ok()) return installed.status();
      step = *installed;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    lowest_step = std::min(lowest_step, step);
  }
  return shards_.empty() ? 0 : lowest_step;
}

absl::StatusOr<uint64_t> PsClient::PullAll(float* params) {
  std::vector<bool> seen(plan_.partitions_size(), false);
  uint64_t lowest_step = ~uint64_t{0};
  for (const LaneKeeper::ShardLink& shard : shards_) {
    const ShardRef ref = RefOf(shard);
    if (ref.stub == nullptr) return absl::InvalidArgumentError(ref.name + ": no channel");
    // A stream broken halfway is pulled again whole: the values are the same.
    absl::Status status = WithRetries([&]() -> absl::Status {
      uint64_t bytes = 0;
      absl::StatusOr<uint64_t> step =
          PullFromShard(ref, identity_.job_id, plan_, params, seen, &bytes);
      bytes_pulled_ += bytes;
      if (!step.ok()) return step.status();
      lowest_step = std::min(lowest_step, *step);
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
  }
  for (int id = 0; id < plan_.partitions_size(); ++id) {
    if (!seen[id]) {
      return absl::DataLossError(absl::StrCat("Pull: no shard sent partition ", id,
                                              " (owner: shard ", plan_.partitions(id).shard(),
                                              ")"));
    }
  }
  return plan_.partitions_size() == 0 ? 0 : lowest_step;
}

absl::Status PsClient::Open() { return lanes_->Open(); }

AnswerInto PsClient::AnswerPlaceLocked(uint32_t partition, const Outgoing& push) const {
  const PartitionState& state = partitions_[partition];
  if (state.expect_dst == nullptr || state.expect_step != push.step) return {};
  return AnswerInto{state.expect_dst,
                    static_cast<size_t>(plan_.partitions(partition).length()) * sizeof(float)};
}

void PsClient::WritePush(uint32_t partition, const Outgoing& push, AnswerInto answer) {
  PushHeader header;
  header.job_id = identity_.job_id;
  header.generation = identity_.generation;
  header.step = push.step;
  header.node_rank = identity_.node_rank;
  header.partition_id = partition;
  header.dtype = PartitionDtype(plan_.partitions(partition).buffers(), wire_dtype_);
  header.sample_count = push.samples;
  header.steps = push.steps;
  // Not written (no lane now, a broken connection): the reader reconnects and sends
  // every push still awaiting its update again, this one included (Reconnected).
  if (lanes_->Write(partition, header, push.data, push.bytes, answer)) {
    bytes_pushed_ += push.bytes;
  }
}

absl::Status PsClient::Push(uint64_t step, uint32_t partition, const float* data,
                            uint64_t sample_count, uint32_t steps) {
  if (partition >= static_cast<uint32_t>(plan_.partitions_size())) {
    return absl::InvalidArgumentError(absl::StrCat("Push: unknown partition ", partition));
  }
  const v1::Partition& info = plan_.partitions(partition);
  if (!lanes_->Carries(partition)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Push: partition ", partition, " belongs to shard ", info.shard(),
                     ", which is not in the shard map"));
  }
  Outgoing push;
  push.step = step;
  push.samples = sample_count;
  push.steps = std::max<uint32_t>(1, steps);
  const v1::DType dtype = PartitionDtype(info.buffers(), wire_dtype_);
  push.bytes = static_cast<size_t>(info.length()) * WireBytes(dtype);
  if (dtype == v1::FLOAT32) {
    push.data = reinterpret_cast<const char*>(data);
  } else {
    char* narrowed = narrowed_.data() + info.offset() * WireBytes(dtype);
    NarrowInto(dtype, data, info.length(), narrowed);
    push.data = narrowed;
  }
  AnswerInto answer;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    PartitionState& current = partitions_[partition];
    current.awaiting = true;
    current.pushed = push;
    answer = AnswerPlaceLocked(partition, push);
  }
  WritePush(partition, push, answer);
  return absl::OkStatus();
}

void PsClient::ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) {
  // Only where the answer to a push is the update of its step, not any values.
  if (mode_ == v1::ASYNC || mode_ == v1::BOUNDED_STALENESS) return;
  if (partition >= static_cast<uint32_t>(plan_.partitions_size()) || dst == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return;
  PartitionState& state = partitions_[partition];
  state.expect_dst = dst;
  state.expect_step = step;
  state.received_direct = false;
}

void PsClient::DropExpectationsLocked() {
  for (PartitionState& state : partitions_) {
    state.expect_dst = nullptr;  // An update already received there stays (received_at).
    // Cut off (the session is over): nothing may write the destination after this.
    // The lane the update arrives on, which need not be the partition's own, lives
    // until its reader returns from the receive.
    if (state.receiving_direct) state.receiving_lane->Shutdown();
  }
  mu_.Await(absl::Condition(
      +[](std::vector<PartitionState>* states) {
        for (const PartitionState& state : *states) {
          if (state.receiving_direct) return false;
        }
        return true;
      },
      &partitions_));
}

float* PsClient::Claim(PushPullLane& lane, const PartitionValuesView& head,
                                     uint64_t data_bytes) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return nullptr;  // The session is over: nothing more lands.
  if (head.partition_id >= static_cast<uint32_t>(plan_.partitions_size())) return nullptr;
  PartitionState& state = partitions_[head.partition_id];
  const v1::Partition& partition = plan_.partitions(head.partition_id);
  if (state.expect_dst == nullptr || !state.awaiting || state.pushed.step != state.expect_step ||
      head.step <= state.pushed.step || head.dtype != v1::FLOAT32 ||
      data_bytes != static_cast<uint64_t>(partition.length()) * sizeof(float)) {
    return nullptr;
  }
  state.receiving_direct = true;
  state.receiving_lane = &lane;
  state.receiving_into = state.expect_dst;
  return state.expect_dst;
}

void PsClient::Landed(const PartitionValuesView& head, uint64_t data_bytes,
                      const absl::Status& read, bool in_place) {
  uint64_t pushed_step;
  {
    absl::MutexLock lock(&mu_);
    if (!LandedLocked(head, data_bytes, read)) return;
    // Counted before the lock wakes WaitUpdated, like direct_updates_.
    if (in_place) ++in_place_updates_;
    pushed_step = partitions_[head.partition_id].pushed.step;
  }
  if (landed_listener_) landed_listener_(head.partition_id, pushed_step);
}

bool PsClient::LandedLocked(const PartitionValuesView& head, uint64_t data_bytes,
                            const absl::Status& read) {
  PartitionState& state = partitions_[head.partition_id];
  state.receiving_direct = false;
  state.receiving_lane = nullptr;
  // Where Claim sent it: an expectation dropped meanwhile (an interrupt) does not undo
  // an update that arrived, and WaitUpdated copies it from there.
  float* const landed_at = state.receiving_into;
  state.receiving_into = nullptr;
  if (!read.ok()) return false;
  bytes_pulled_ += data_bytes;
  state.values.partition_id = head.partition_id;
  state.values.dtype = head.dtype;
  state.values.version = head.version;
  state.values.step = head.step;
  state.values.data.Clear();
  state.has_values = true;
  state.received_direct = true;
  state.received_at = landed_at;
  state.awaiting = false;
  ++direct_updates_;
  return true;
}

absl::Status PsClient::WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                                   float* dst) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failure_.ok() || !partitions_[partition].awaiting ||
           partitions_[partition].pushed.step != step;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    // A receive into an expected destination still running is cut off (its
    // connection is stalled), so that nothing writes there after we return.
    DropExpectationsLocked();
    return absl::DeadlineExceededError(absl::StrCat(
        "no update of partition ", partition, " for step ", step, " from shard ",
        plan_.partitions(partition).shard(), " within ", absl::FormatDuration(timeout)));
  }
  // An update that arrived counts, even after an interruption or a later failure.
  PartitionState& state = partitions_[partition];
  if (state.awaiting && state.pushed.step == step) {
    DropExpectationsLocked();
    return failure_;
  }
  float* const received_into = state.received_direct ? state.received_at : nullptr;
  state.expect_dst = nullptr;
  state.received_direct = false;
  if (received_into != nullptr) {  // Received straight into the expected destination.
    if (received_into != dst) {
      std::memcpy(dst, received_into, plan_.partitions(partition).length() * sizeof(float));
    }
    return absl::OkStatus();
  }
  if (!state.has_values || state.values.data.size == 0) {
    DropExpectationsLocked();
    return absl::InternalError(
        absl::StrCat("partition ", partition, ": no values received for step ", step));
  }
  // The one copy of an update: from the slices it arrived in to the parameters.
  CopyFloatsInto(state.values.data, dst);
  return absl::OkStatus();
}

void PsClient::OnUpdate(const std::string& lane, absl::Status decoded,
                        ReceivedMessage& received, PartitionValuesView& values) {
  if (decoded.ok()) decoded = CheckPartitionValues(plan_, values);
  absl::MutexLock lock(&mu_);
  if (!decoded.ok()) {
    FailLocked(absl::InvalidArgumentError(absl::StrCat(lane, ": ", decoded.message())));
    return;
  }
  bytes_pulled_ += values.data.size;
  PartitionState& state = partitions_[values.partition_id];
  std::swap(state.received, received);
  std::swap(state.values, values);
  state.has_values = true;
  state.received_direct = false;
  // SYNC and LOCAL_SGD: the update of our step (round) makes the values the parameters
  // for a later step; a re-sent older update does not count. ASYNC /
  // BOUNDED_STALENESS: any answer after our push.
  const bool independent = mode_ == v1::ASYNC || mode_ == v1::BOUNDED_STALENESS;
  if (independent || state.values.step > state.pushed.step) state.awaiting = false;
}

void PsClient::Reconnected(const std::vector<uint32_t>& partitions) {
  struct Resend {
    uint32_t id;
    Outgoing push;
    AnswerInto answer;
  };
  std::vector<Resend> resend;
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t id : partitions) {
      const PartitionState& state = partitions_[id];
      if (state.awaiting) resend.push_back({id, state.pushed, AnswerPlaceLocked(id, state.pushed)});
    }
  }
  for (const Resend& again : resend) WritePush(again.id, again.push, again.answer);
}

void PsClient::Failed(absl::Status status) {
  absl::MutexLock lock(&mu_);
  FailLocked(std::move(status));
}

void PsClient::Interrupt(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  FailLocked(absl::AbortedError(reason));
  DropExpectationsLocked();
}

void PsClient::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    FailLocked(absl::CancelledError("PS client closed"));
  }
  lanes_->Close();  // Every reader has ended: no receive into an expectation runs.
  absl::MutexLock lock(&mu_);
  DropExpectationsLocked();
}

}  // namespace tributary::worker
