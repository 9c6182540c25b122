#include "worker/comm/ps_client.h"

#include <glog/logging.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/cluster_auth.h"
#include "common/grpc_status.h"
#include "common/wire_dtype.h"

namespace tributary::worker {

struct PsClient::Shard {
  uint32_t index = 0;
  std::string address;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
  std::vector<uint32_t> partitions;  // Owned by this shard, in plan order.
};

// One PushPull stream to a shard, on a connection of its own when a shard has several,
// carrying every streams_per_shard-th partition of it.
struct PsClient::Lane {
  const Shard* shard = nullptr;
  int number = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::vector<uint32_t> partitions;

  // Guards the stream against concurrent writes and against being replaced by a
  // reconnect while a push is written.
  absl::Mutex write_mu;
  std::unique_ptr<grpc::ClientContext> context ABSL_GUARDED_BY(write_mu);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream
      ABSL_GUARDED_BY(write_mu);
  std::thread reader;
};

namespace {

// PushPull as a raw-message call: the generated stub would serialize protobufs, and
// gRPC's public generic stub has no blocking bidi stream, so the stream is made the
// way the generated stub makes it, with grpc::ByteBuffer for both message types.
constexpr char kPushPullMethod[] = "/tributary.v1.ParameterServer/PushPull";

bool Retryable(grpc::StatusCode code) {
  // UNAVAILABLE: the shard went away (restart, network); CANCELLED/ABORTED/INTERNAL:
  // the transport broke the stream. A refusal (FAILED_PRECONDITION, INVALID_ARGUMENT)
  // is not retried: it is the shard's answer.
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::ABORTED || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNKNOWN;
}

}  // namespace

PsClient::PsClient(PsIdentity identity, v1::PartitionPlan plan, std::vector<v1::ShardInfo> shards,
                   ChannelOptions channel_options, v1::TrainingMode mode, v1::DType wire_dtype,
                   absl::Duration retry_budget, int streams_per_shard)
    : identity_(std::move(identity)),
      plan_(std::move(plan)),
      channel_options_(std::move(channel_options)),
      mode_(mode),
      wire_dtype_(wire_dtype),
      retry_budget_(retry_budget),
      streams_per_shard_(std::max(1, streams_per_shard)),
      partitions_(plan_.partitions_size()) {
  for (const v1::ShardInfo& info : shards) {
    auto shard = std::make_unique<Shard>();
    shard->index = info.shard_index();
    shard->address = info.address();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(info.address(), channel_options_);
    if (channel.ok()) {
      shard->stub = v1::ParameterServer::NewStub(*channel);
    } else {
      LOG(ERROR) << "PS shard " << info.shard_index() << ": " << channel.status();
    }
    // The PushPull streams, each on its own connection when there are several (one
    // connection's throughput is what a single TCP stream and gRPC's one thread per
    // read and write can do).
    ChannelOptions lane_options = channel_options_;
    lane_options.own_connection = channel_options_.own_connection || streams_per_shard_ > 1;
    for (int number = 0; number < streams_per_shard_; ++number) {
      auto lane = std::make_unique<Lane>();
      lane->shard = shard.get();
      lane->number = number;
      absl::StatusOr<std::shared_ptr<grpc::Channel>> lane_channel =
          MakeChannel(info.address(), lane_options);
      if (lane_channel.ok()) lane->channel = *lane_channel;
      lanes_.push_back(std::move(lane));
    }
    shards_.push_back(std::move(shard));
  }
  lane_of_.assign(plan_.partitions_size(), nullptr);
  for (const v1::Partition& partition : plan_.partitions()) {
    for (size_t s = 0; s < shards_.size(); ++s) {
      Shard& shard = *shards_[s];
      if (shard.index != partition.shard()) continue;
      Lane* lane = lanes_[s * streams_per_shard_ + shard.partitions.size() % streams_per_shard_]
                       .get();
      shard.partitions.push_back(partition.id());
      lane->partitions.push_back(partition.id());
      lane_of_[partition.id()] = lane;
    }
  }
  if (WireBytes(wire_dtype_) < sizeof(float)) {
    narrowed_.resize(static_cast<size_t>(plan_.total_elements()) * WireBytes(wire_dtype_));
  }
}

PsClient::~PsClient() { Close(); }

std::string PsClient::ShardName(const Shard& shard) const {
  return absl::StrCat("PS shard ", shard.index, " at ", shard.address);
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

absl::StatusOr<uint64_t> PsClient::InitShard(Shard& shard, const v1::JobSpec& spec,
                                             uint64_t total_steps, const float* params) {
  grpc::ClientContext context;
  if (!identity_.node_credential.empty()) {
    context.AddMetadata(kNodeCredentialMetadata, identity_.node_credential);
  }
  v1::InitPartitionsResponse response;
  auto writer = shard.stub->InitPartitions(&context, &response);
  v1::InitPartitionsRequest request;
  v1::InitHeader& header = *request.mutable_header();
  header.set_job_id(identity_.job_id);
  *header.mutable_job() = spec;
  *header.mutable_plan() = plan_;
  header.set_shard_index(shard.index);
  header.set_total_steps(total_steps);
  header.set_generation(identity_.generation);
  header.set_num_nodes(identity_.num_nodes);
  header.set_resume_step(identity_.resume_step);
  header.set_node_rank(identity_.node_rank);
  bool written = writer->Write(request);
  for (uint32_t id : shard.partitions) {
    if (!written) break;
    const v1::Partition& partition = plan_.partitions(id);
    v1::InitPartitionsRequest values;
    v1::PartitionValues& initial = *values.mutable_initial();
    initial.set_partition_id(id);
    initial.set_dtype(v1::FLOAT32);
    initial.set_data(reinterpret_cast<const char*>(params + partition.offset()),
                     partition.length() * sizeof(float));
    written = writer->Write(values);
  }
  writer->WritesDone();
  absl::Status status =
      FromGrpcStatus(writer->Finish(), absl::StrCat("InitPartitions on ", ShardName(shard)));
  if (!status.ok()) return status;
  LOG(INFO) << ShardName(shard) << ": job " << identity_.job_id
            << (response.created() ? " installed" : " already installed") << ", step "
            << response.step()
            << (response.restored_from().empty()
                    ? std::string()
                    : absl::StrCat(" (restored from ", response.restored_from(), ")"));
  return response.step();
}

absl::StatusOr<uint64_t> PsClient::InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                                  const float* params) {
  uint64_t lowest_step = ~uint64_t{0};
  for (auto& shard : shards_) {
    if (shard->stub == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(ShardName(*shard), ": no channel"));
    }
    uint64_t step = 0;
    absl::Status status = WithRetries([&]() -> absl::Status {
      absl::StatusOr<uint64_t> installed = InitShard(*shard, spec, total_steps, params);
      if (!installed.ok()) return installed.status();
      step = *installed;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    lowest_step = std::min(lowest_step, step);
  }
  return shards_.empty() ? 0 : lowest_step;
}

absl::Status PsClient::CheckValues(const PartitionValuesView& values) const {
  if (values.partition_id >= static_cast<uint32_t>(plan_.partitions_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the PS sent unknown partition ", values.partition_id));
  }
  const v1::Partition& partition = plan_.partitions(values.partition_id);
  if (values.dtype != v1::FLOAT32 ||
      values.data.size != static_cast<size_t>(partition.length()) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the PS sent partition ", partition.id(), " as ", v1::DType_Name(values.dtype), " with ",
        values.data.size, " bytes; expected FLOAT32 with ", partition.length() * sizeof(float)));
  }
  return absl::OkStatus();
}

absl::Status PsClient::StoreValues(const v1::PartitionValues& values, float* params) {
  PartitionValuesView view;
  view.partition_id = values.partition_id();
  view.dtype = values.dtype();
  view.data = ByteSpans::Of(values.data());
  if (absl::Status checked = CheckValues(view); !checked.ok()) return checked;
  const v1::Partition& partition = plan_.partitions(values.partition_id());
  std::memcpy(params + partition.offset(), values.data().data(), values.data().size());
  bytes_pulled_ += values.data().size();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PsClient::PullShard(Shard& shard, float* params, std::vector<bool>& seen) {
  grpc::ClientContext context;
  v1::PullRequest request;
  request.set_job_id(identity_.job_id);
  auto reader = shard.stub->Pull(&context, request);
  v1::PartitionValues values;
  uint64_t lowest_step = ~uint64_t{0};
  while (reader->Read(&values)) {
    if (absl::Status s = StoreValues(values, params); !s.ok()) {
      context.TryCancel();
      reader->Finish();
      return s;
    }
    seen[values.partition_id()] = true;
    lowest_step = std::min(lowest_step, values.step());
  }
  absl::Status status =
      FromGrpcStatus(reader->Finish(), absl::StrCat("Pull from ", ShardName(shard)));
  if (!status.ok()) return status;
  return lowest_step;
}

absl::StatusOr<uint64_t> PsClient::PullAll(float* params) {
  std::vector<bool> seen(plan_.partitions_size(), false);
  uint64_t lowest_step = ~uint64_t{0};
  for (auto& shard : shards_) {
    if (shard->stub == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(ShardName(*shard), ": no channel"));
    }
    // A stream broken halfway is pulled again whole: the values are the same.
    absl::Status status = WithRetries([&]() -> absl::Status {
      absl::StatusOr<uint64_t> step = PullShard(*shard, params, seen);
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

std::string PsClient::LaneName(const Lane& lane) const {
  if (streams_per_shard_ == 1) return ShardName(*lane.shard);
  return absl::StrCat(ShardName(*lane.shard), " (stream ", lane.number + 1, " of ",
                      streams_per_shard_, ")");
}

absl::Status PsClient::ConnectLane(Lane& lane) {
  absl::MutexLock lock(&lane.write_mu);
  lane.context = std::make_unique<grpc::ClientContext>();
  if (!identity_.node_credential.empty()) {
    lane.context->AddMetadata(kNodeCredentialMetadata, identity_.node_credential);
  }
  lane.stream.reset(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          lane.channel.get(),
          grpc::internal::RpcMethod(kPushPullMethod, grpc::internal::RpcMethod::BIDI_STREAMING),
          lane.context.get()));
  if (lane.stream == nullptr) {
    return absl::UnavailableError(absl::StrCat("PushPull to ", LaneName(lane)));
  }
  return absl::OkStatus();
}

absl::Status PsClient::Open() {
  for (auto& lane : lanes_) {
    if (lane->channel == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(LaneName(*lane), ": no channel"));
    }
    if (absl::Status s = ConnectLane(*lane); !s.ok()) return s;
    Lane* raw = lane.get();
    lane->reader = std::thread([this, raw] { ReadLoop(raw); });
  }
  return absl::OkStatus();
}

void PsClient::WritePush(Lane& lane, uint32_t partition, const Outgoing& push) {
  PushHeader header;
  header.job_id = identity_.job_id;
  header.generation = identity_.generation;
  header.step = push.step;
  header.node_rank = identity_.node_rank;
  header.partition_id = partition;
  header.dtype = PartitionDtype(plan_.partitions(partition).buffers(), wire_dtype_);
  header.sample_count = push.samples;
  header.steps = push.steps;
  grpc::ByteBuffer message = EncodeGradientPush(header, push.data, push.bytes);
  absl::MutexLock lock(&lane.write_mu);
  // A failed write means the stream broke: the reader sees it, reconnects and sends
  // every push still awaiting its update again, this one included. Written through:
  // the message points into the caller's gradient buffer (see EncodeGradientPush).
  if (lane.stream->Write(message, grpc::WriteOptions().set_write_through())) {
    bytes_pushed_ += push.bytes;
  }
}

absl::Status PsClient::Push(uint64_t step, uint32_t partition, const float* data,
                            uint64_t sample_count, uint32_t steps) {
  if (partition >= static_cast<uint32_t>(plan_.partitions_size())) {
    return absl::InvalidArgumentError(absl::StrCat("Push: unknown partition ", partition));
  }
  const v1::Partition& info = plan_.partitions(partition);
  Lane* owner = lane_of_[partition];
  if (owner == nullptr) {
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
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    PartitionState& current = partitions_[partition];
    current.awaiting = true;
    current.pushed = push;
  }
  WritePush(*owner, partition, push);
  return absl::OkStatus();
}

absl::Status PsClient::WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                                   float* dst) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failure_.ok() || !partitions_[partition].awaiting ||
           partitions_[partition].pushed.step != step;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no update of partition ", partition, " for step ", step, " from shard ",
        plan_.partitions(partition).shard(), " within ", absl::FormatDuration(timeout)));
  }
  // An update that arrived counts, even after an interruption or a later failure.
  PartitionState& state = partitions_[partition];
  if (state.awaiting && state.pushed.step == step) return failure_;
  if (!state.has_values) {
    return absl::InternalError(
        absl::StrCat("partition ", partition, ": no values received for step ", step));
  }
  // The one copy of an update: from the slices it arrived in to the parameters.
  CopyFloatsInto(state.values.data, dst);
  return absl::OkStatus();
}

void PsClient::ReadLoop(Lane* lane) {
  grpc::ByteBuffer message;
  ReceivedMessage received;  // Swapped with the partition's, so slices are reused.
  PartitionValuesView values;
  absl::Time unreachable_since = absl::InfiniteFuture();
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  while (true) {
    grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream;
    {
      absl::MutexLock lock(&lane->write_mu);
      stream = lane->stream.get();
    }
    while (stream->Read(&message)) {
      unreachable_since = absl::InfiniteFuture();
      backoff.Reset();
      absl::Status stored = DecodePartitionValues(message, &received, &values);
      message.Clear();
      if (stored.ok()) stored = CheckValues(values);
      absl::MutexLock lock(&mu_);
      if (!stored.ok()) {
        if (failure_.ok()) {
          failure_ = absl::InvalidArgumentError(
              absl::StrCat(LaneName(*lane), ": ", stored.message()));
        }
        continue;
      }
      bytes_pulled_ += values.data.size;
      PartitionState& state = partitions_[values.partition_id];
      std::swap(state.received, received);
      std::swap(state.values, values);
      state.has_values = true;
      // SYNC and LOCAL_SGD: the update of our step (round) makes the values the
      // parameters for a later step; a re-sent older update does not count. ASYNC /
      // BOUNDED_STALENESS: any answer after our push.
      const bool independent = mode_ == v1::ASYNC || mode_ == v1::BOUNDED_STALENESS;
      if (independent || state.values.step > state.pushed.step) state.awaiting = false;
    }
    const grpc::Status finished = stream->Finish();
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      if (!Retryable(finished.error_code())) {
        if (failure_.ok()) {
          failure_ = FromGrpcStatus(finished, absl::StrCat("PushPull to ", LaneName(*lane)));
        }
        return;
      }
    }
    // The stream broke: reconnect with backoff and send again what still awaits an update.
    if (unreachable_since == absl::InfiniteFuture()) unreachable_since = absl::Now();
    if (absl::Now() - unreachable_since > retry_budget_) {
      absl::MutexLock lock(&mu_);
      if (failure_.ok()) {
        failure_ = absl::UnavailableError(absl::StrCat(LaneName(*lane), " unreachable for ",
                                                       absl::FormatDuration(retry_budget_), ": ",
                                                       finished.error_message()));
      }
      return;
    }
    LOG(WARNING) << "PushPull to " << LaneName(*lane) << " broke (" << finished.error_message()
                 << "); reconnecting in " << absl::FormatDuration(backoff.Peek());
    absl::SleepFor(backoff.Next());
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
    }
    if (!ConnectLane(*lane).ok()) continue;
    ++reconnects_;
    std::vector<std::pair<uint32_t, Outgoing>> resend;
    {
      absl::MutexLock lock(&mu_);
      for (uint32_t id : lane->partitions) {
        if (partitions_[id].awaiting) resend.emplace_back(id, partitions_[id].pushed);
      }
    }
    for (const auto& [id, push] : resend) WritePush(*lane, id, push);
  }
}

void PsClient::Interrupt(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = absl::AbortedError(reason);
}

void PsClient::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    if (failure_.ok()) failure_ = absl::CancelledError("PS client closed");
  }
  for (auto& lane : lanes_) {
    {
      absl::MutexLock lock(&lane->write_mu);
      if (lane->context != nullptr) lane->context->TryCancel();
    }
    if (lane->reader.joinable()) lane->reader.join();
  }
}

}  // namespace tributary::worker
