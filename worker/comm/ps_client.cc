#include "worker/comm/ps_client.h"

#include <glog/logging.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/cluster_auth.h"
#include "common/data_plane_wire.h"
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
  bool connected ABSL_GUARDED_BY(write_mu) = false;
  bool tcp ABSL_GUARDED_BY(write_mu) = false;  // The data plane, not a gRPC stream.
  std::unique_ptr<grpc::ClientContext> context ABSL_GUARDED_BY(write_mu);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream
      ABSL_GUARDED_BY(write_mu);
  // The data-plane socket: replaced (and closed) only under both mutexes, so Close()
  // may shut it down under fd_mu while a push is written under write_mu.
  absl::Mutex fd_mu;
  int fd = -1;
  // While the lane connects to the data plane: the OpenDataPlane call and the socket
  // waiting for admission, for Close() to cancel (under fd_mu).
  grpc::ClientContext* opening = nullptr;
  int connecting_fd = -1;
  // A data-plane connection the prober made for a lane on gRPC, for the reader to take
  // (under fd_mu).
  int probed_fd = -1;
  // One ConnectData at a time (the reader's and the prober's share opening/connecting_fd).
  absl::Mutex connect_mu;
  bool warned_fallback = false;  // Reader thread only.
  // `auto` on gRPC because the data port failed it: when to try it again, and the
  // wait after that (under write_mu).
  bool fell_back ABSL_GUARDED_BY(write_mu) = false;
  absl::Time next_probe ABSL_GUARDED_BY(write_mu) = absl::InfiniteFuture();
  absl::Duration probe_wait ABSL_GUARDED_BY(write_mu);
  std::thread reader;
};

namespace {

// PushPull as a raw-message call: the generated stub would serialize protobufs, and
// gRPC's public generic stub has no blocking bidi stream, so the stream is made the
// way the generated stub makes it, with grpc::ByteBuffer for both message types.
constexpr char kPushPullMethod[] = "/tributary.v1.ParameterServer/PushPull";

constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

bool Retryable(grpc::StatusCode code) {
  // UNAVAILABLE: the shard went away (restart, network); CANCELLED/ABORTED/INTERNAL:
  // the transport broke the stream. A refusal (FAILED_PRECONDITION, INVALID_ARGUMENT)
  // is not retried: it is the shard's answer.
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::ABORTED || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNKNOWN;
}

bool Retryable(const absl::Status& status) {
  return Retryable(static_cast<grpc::StatusCode>(status.code()));
}

}  // namespace

absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name) {
  if (name == "auto") return PsTransport::kAuto;
  if (name == "tcp") return PsTransport::kTcp;
  if (name == "grpc") return PsTransport::kGrpc;
  return absl::InvalidArgumentError(
      absl::StrCat("--ps_transport=", name, ": expected auto, tcp or grpc"));
}

const char* PsTransportName(PsTransport transport) {
  switch (transport) {
    case PsTransport::kAuto: return "auto";
    case PsTransport::kTcp: return "tcp";
    case PsTransport::kGrpc: return "grpc";
  }
  return "?";
}

PsClient::PsClient(PsIdentity identity, v1::PartitionPlan plan, std::vector<v1::ShardInfo> shards,
                   ChannelOptions channel_options, v1::TrainingMode mode, v1::DType wire_dtype,
                   absl::Duration retry_budget, int streams_per_shard, PsTransport transport)
    : identity_(std::move(identity)),
      plan_(std::move(plan)),
      channel_options_(std::move(channel_options)),
      mode_(mode),
      wire_dtype_(wire_dtype),
      retry_budget_(retry_budget),
      streams_per_shard_(std::max(1, streams_per_shard)),
      transport_(transport),
      partitions_(plan_.partitions_size()) {
  for (const v1::Partition& partition : plan_.partitions()) {
    max_values_frame_ =
        std::max<uint64_t>(max_values_frame_, static_cast<uint64_t>(partition.length()) * 4);
  }
  max_values_frame_ += data_plane::kMessageOverheadBytes;
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

absl::StatusOr<int> PsClient::ConnectData(Lane& lane, DataPlaneTrouble* trouble) {
  *trouble = DataPlaneTrouble::kDataPort;
  const Shard& shard = *lane.shard;
  if (shard.stub == nullptr) {
    *trouble = DataPlaneTrouble::kRefused;
    return absl::InvalidArgumentError(absl::StrCat(ShardName(shard), ": no channel"));
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kConnectTimeout));
  if (!identity_.node_credential.empty()) {
    context.AddMetadata(kNodeCredentialMetadata, identity_.node_credential);
  }
  {
    // Close() cancels the call rather than wait for its deadline.
    absl::MutexLock lock(&lane.fd_mu);
    if (closed_.load()) return absl::CancelledError("PS client closed");
    lane.opening = &context;
  }
  v1::OpenDataPlaneRequest request;
  request.set_job_id(identity_.job_id);
  request.set_generation(identity_.generation);
  request.set_node_rank(identity_.node_rank);
  v1::OpenDataPlaneResponse response;
  absl::Status opened = FromGrpcStatus(shard.stub->OpenDataPlane(&context, request, &response),
                                       absl::StrCat("OpenDataPlane on ", LaneName(lane)));
  {
    absl::MutexLock lock(&lane.fd_mu);
    lane.opening = nullptr;
  }
  if (!opened.ok()) {
    switch (opened.code()) {
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kDeadlineExceeded:
      case absl::StatusCode::kCancelled:
        *trouble = DataPlaneTrouble::kShardUnreachable;
        return absl::UnavailableError(opened.message());
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kUnimplemented:
        *trouble = DataPlaneTrouble::kNone;
        return opened;
      case absl::StatusCode::kResourceExhausted:  // Too many tickets now: later.
        return absl::UnavailableError(opened.message());
      default:  // A refusal of the caller: gRPC's PushPull would refuse it too.
        *trouble = DataPlaneTrouble::kRefused;
        return opened;
    }
  }
  // From here on every failure is the data port's (or the network's): UNAVAILABLE.
  absl::StatusOr<std::string> host = data_plane::HostOf(shard.address);
  if (!host.ok()) return absl::UnavailableError(host.status().message());
  if (response.port() == 0 || response.port() > 65535 ||
      response.ticket().size() != data_plane::kTicketBytes) {
    return absl::UnavailableError(
        absl::StrCat("OpenDataPlane on ", LaneName(lane), ": port ", response.port(),
                     " and a ticket of ", response.ticket().size(), " bytes (expected 32)"));
  }
  absl::StatusOr<int> fd =
      data_plane::Connect(*host, static_cast<int>(response.port()), kConnectTimeout);
  if (!fd.ok()) return absl::UnavailableError(fd.status().message());
  {
    absl::MutexLock lock(&lane.fd_mu);
    if (closed_.load()) {
      ::close(*fd);
      return absl::CancelledError("PS client closed");
    }
    lane.connecting_fd = *fd;  // Close() shuts it down while it waits for admission.
  }
  // The hello, and the shard's answer to it (a status frame).
  auto hello = data_plane::EncodeHello(response.ticket());
  iovec piece = {hello.data(), hello.size()};
  absl::Status admitted = data_plane::WriteAll(*fd, &piece, 1, "data plane hello");
  data_plane::SetReceiveTimeout(*fd, kConnectTimeout);
  if (admitted.ok()) {
    absl::StatusOr<data_plane::FrameHeader> header =
        data_plane::ReadFrameHeader(*fd, 0, "data plane admission");
    if (!header.ok()) {
      admitted = header.status();
    } else if (header->kind != data_plane::kStatus) {
      admitted = absl::InvalidArgumentError("the shard answered the hello with a message");
    } else {
      std::string payload(header->length, '\0');
      admitted = data_plane::ReadFull(*fd, payload.data(), payload.size(), "data plane admission");
      if (admitted.ok()) admitted = data_plane::ParseStatusPayload(payload);
    }
  }
  {
    absl::MutexLock lock(&lane.fd_mu);
    lane.connecting_fd = -1;
  }
  if (!admitted.ok()) {
    ::close(*fd);
    // Closed unanswered (the shard's connection limit, a restart), an expired ticket,
    // a timeout: all worth another ticket later (or gRPC, in auto).
    return absl::UnavailableError(absl::StrCat("data plane of ", LaneName(lane), " at ", *host,
                                               ":", response.port(), ": ", admitted.message()));
  }
  data_plane::SetReceiveTimeout(*fd, absl::ZeroDuration());
  // A shard that stops reading fails a push after this long instead of holding it.
  data_plane::SetSendTimeout(*fd, retry_budget_);
  *trouble = DataPlaneTrouble::kNone;
  return *fd;
}

absl::Status PsClient::ConnectLane(Lane& lane) {
  absl::StatusOr<int> fd = absl::FailedPreconditionError("gRPC transport asked for");
  DataPlaneTrouble trouble = DataPlaneTrouble::kNone;
  int probed = -1;
  {
    absl::MutexLock lock(&lane.fd_mu);
    std::swap(probed, lane.probed_fd);
  }
  if (probed >= 0) {
    fd = probed;  // The prober's connection, admitted already.
  } else if (transport_ != PsTransport::kGrpc) {
    {
      absl::MutexLock connecting(&lane.connect_mu);
      fd = ConnectData(lane, &trouble);
    }
    if (!fd.ok()) {
      // The shard not answering is retried later, a refusal of the caller returned;
      // `tcp` returns the rest too (UNAVAILABLE: retried), while `auto` speaks gRPC to a
      // shard that runs no data plane or whose data port fails it.
      if (trouble == DataPlaneTrouble::kShardUnreachable ||
          trouble == DataPlaneTrouble::kRefused || transport_ == PsTransport::kTcp ||
          closed_.load()) {
        return fd.status();
      }
      if (!lane.warned_fallback) {
        LOG(WARNING) << LaneName(lane) << ": " << fd.status().message()
                     << "; PushPull goes over gRPC";
        lane.warned_fallback = true;
      }
    }
  }
  absl::MutexLock lock(&lane.write_mu);
  {
    absl::MutexLock fd_lock(&lane.fd_mu);
    if (lane.fd >= 0) {
      ::close(lane.fd);
      lane.fd = -1;
      --tcp_lanes_;
    }
    if (fd.ok()) {
      lane.fd = *fd;
      ++tcp_lanes_;
      if (closed_.load()) ::shutdown(lane.fd, SHUT_RDWR);
    }
  }
  lane.connected = true;
  lane.tcp = fd.ok();
  // On gRPC because the data port failed it: try it again later (ProbeLoop).
  const bool fell_back = !lane.tcp && trouble == DataPlaneTrouble::kDataPort;
  if (fell_back && !lane.fell_back) lane.probe_wait = first_data_plane_retry_;
  lane.fell_back = fell_back;
  lane.next_probe = fell_back ? absl::Now() + lane.probe_wait : absl::InfiniteFuture();
  lane.stream.reset();
  lane.context.reset();
  if (lane.tcp) return absl::OkStatus();
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
    lane.connected = false;
    return absl::UnavailableError(absl::StrCat("PushPull to ", LaneName(lane)));
  }
  if (closed_.load()) lane.context->TryCancel();
  return absl::OkStatus();
}

void PsClient::ProbeLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&closing_), absl::Milliseconds(100))) return;
    }
    for (auto& lane : lanes_) {
      {
        absl::MutexLock lock(&lane->write_mu);
        if (!lane->fell_back || !lane->connected || lane->tcp || absl::Now() < lane->next_probe) {
          continue;
        }
        lane->next_probe = absl::InfiniteFuture();  // One try at a time.
      }
      DataPlaneTrouble trouble;
      absl::StatusOr<int> fd;
      {
        absl::MutexLock connecting(&lane->connect_mu);
        fd = ConnectData(*lane, &trouble);
      }
      absl::MutexLock lock(&lane->write_mu);
      if (!fd.ok()) {
        lane->probe_wait = std::min(2 * lane->probe_wait, kMaxDataPlaneRetry);
        if (lane->fell_back) lane->next_probe = absl::Now() + lane->probe_wait;
        LOG(INFO) << LaneName(*lane) << ": the data plane still fails (" << fd.status().message()
                  << "); next try in " << absl::FormatDuration(lane->probe_wait);
        continue;
      }
      absl::MutexLock fd_lock(&lane->fd_mu);
      if (closed_.load() || !lane->fell_back || lane->tcp || lane->probed_fd >= 0) {
        ::close(*fd);
        continue;
      }
      LOG(INFO) << LaneName(*lane) << ": the data plane answers again; PushPull moves back to it";
      lane->probed_fd = *fd;
      // The reader sees the gRPC stream end, takes the connection and sends again what
      // still awaits its update (the shard ignores exact duplicates).
      if (lane->context != nullptr) lane->context->TryCancel();
    }
  }
}

absl::Status PsClient::Open() {
  if (transport_ == PsTransport::kAuto && !prober_.joinable()) {
    prober_ = std::thread([this] { ProbeLoop(); });
  }
  for (auto& lane : lanes_) {
    if (lane->channel == nullptr || lane->shard->stub == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(LaneName(*lane), ": no channel"));
    }
    // A shard not reachable yet is the reader's to reconnect to (with backoff, within
    // the retry budget); any other error is returned.
    if (absl::Status s = ConnectLane(*lane); !s.ok() && !Retryable(s)) return s;
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
  absl::MutexLock lock(&lane.write_mu);
  // Not connected, or a failed write (the connection broke): the reader reconnects and
  // sends every push still awaiting its update again, this one included.
  if (!lane.connected) return;
  if (lane.tcp) {
    // Frame header, message head and the data where it lies, in one sendmsg: when it
    // returns, the kernel holds the bytes and the caller may reuse its buffer.
    std::string head = GradientPushHead(header, push.bytes);
    auto frame = data_plane::EncodeFrameHeader(data_plane::kMessage, head.size() + push.bytes);
    iovec pieces[3] = {{frame.data(), frame.size()},
                       {head.data(), head.size()},
                       {const_cast<char*>(push.data), push.bytes}};
    absl::Status written =
        data_plane::WriteAll(lane.fd, pieces, push.bytes == 0 ? 2 : 3, "PushPull push");
    if (written.ok()) {
      bytes_pushed_ += push.bytes;
    } else {
      ::shutdown(lane.fd, SHUT_RDWR);  // The reader sees it and reconnects.
    }
    return;
  }
  grpc::ByteBuffer message = EncodeGradientPush(header, push.data, push.bytes);
  // Written through: the message points into the caller's gradient buffer (see
  // EncodeGradientPush).
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
    if (state.receiving_direct && state.receiving_lane != nullptr) {
      // Cut off (the session is over): nothing may write the destination after this.
      // The lane the update arrives on, which need not be the partition's own.
      absl::MutexLock fd_lock(&state.receiving_lane->fd_mu);
      if (state.receiving_lane->fd >= 0) ::shutdown(state.receiving_lane->fd, SHUT_RDWR);
    }
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

float* PsClient::DirectTargetLocked(Lane& lane, const PartitionValuesView& head,
                                    uint64_t data_bytes) {
  if (!failure_.ok()) return nullptr;  // The session is over: nothing more lands there.
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
  return state.expect_dst;
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

void PsClient::Store(Lane& lane, absl::Status decoded, ReceivedMessage& received,
                     PartitionValuesView& values) {
  if (decoded.ok()) decoded = CheckValues(values);
  absl::MutexLock lock(&mu_);
  if (!decoded.ok()) {
    if (failure_.ok()) {
      failure_ = absl::InvalidArgumentError(absl::StrCat(LaneName(lane), ": ", decoded.message()));
    }
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

PsClient::ReadEnd PsClient::ReadGrpc(Lane& lane, ReceivedMessage& received,
                                     PartitionValuesView& values) {
  grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream;
  {
    absl::MutexLock lock(&lane.write_mu);
    stream = lane.stream.get();
  }
  ReadEnd end;
  grpc::ByteBuffer message;
  while (stream->Read(&message)) {
    end.received = true;
    absl::Status decoded = DecodePartitionValues(message, &received, &values);
    message.Clear();
    Store(lane, decoded, received, values);
  }
  end.status = FromGrpcStatus(stream->Finish(), absl::StrCat("PushPull to ", LaneName(lane)));
  return end;
}

PsClient::ReadEnd PsClient::ReadTcp(Lane& lane, ReceivedMessage& received,
                                    PartitionValuesView& values) {
  int fd;
  {
    absl::MutexLock lock(&lane.fd_mu);
    fd = lane.fd;
  }
  const std::string what = absl::StrCat("PushPull to ", LaneName(lane), " (data plane)");
  ReadEnd end;
  while (true) {
    absl::StatusOr<data_plane::FrameHeader> header =
        data_plane::ReadFrameHeader(fd, max_values_frame_, what);
    if (!header.ok()) {
      // The shard closed without a status, or the socket broke: reconnect.
      end.status = absl::UnavailableError(header.status().message());
      if (absl::IsInvalidArgument(header.status())) end.status = header.status();
      return end;
    }
    // The message's first bytes: when they show the awaited update of a partition
    // expected into the parameters, its data is received straight there.
    char prefix[64];
    const size_t prefix_size = std::min<uint64_t>(sizeof(prefix), header->length);
    if (absl::Status read = data_plane::ReadFull(fd, prefix, prefix_size, what); !read.ok()) {
      end.status = absl::UnavailableError(read.message());
      return end;
    }
    PartitionValuesView head;
    size_t data_offset = 0;
    float* target = nullptr;
    if (header->kind == data_plane::kMessage &&
        ParseValuesHead(absl::string_view(prefix, prefix_size), header->length, &head,
                        &data_offset)) {
      absl::MutexLock lock(&mu_);
      target = DirectTargetLocked(lane, head, header->length - data_offset);
    }
    if (target != nullptr) {
      char* into = reinterpret_cast<char*>(target);
      const size_t in_prefix = prefix_size - data_offset;
      std::memcpy(into, prefix + data_offset, in_prefix);
      absl::Status read = data_plane::ReadFull(fd, into + in_prefix,
                                               header->length - data_offset - in_prefix, what);
      absl::MutexLock lock(&mu_);
      PartitionState& state = partitions_[head.partition_id];
      state.receiving_direct = false;
      state.receiving_lane = nullptr;
      if (!read.ok()) {
        end.status = absl::UnavailableError(read.message());
        return end;
      }
      end.received = true;
      bytes_pulled_ += header->length - data_offset;
      state.values.partition_id = head.partition_id;
      state.values.dtype = head.dtype;
      state.values.version = head.version;
      state.values.step = head.step;
      state.values.data.Clear();
      state.has_values = true;
      state.received_direct = true;
      state.received_at = target;
      state.awaiting = false;
      ++direct_updates_;
      continue;
    }
    std::vector<char>& bytes = received.bytes;
    bytes.resize(header->length);  // The capacity stays from update to update.
    std::memcpy(bytes.data(), prefix, prefix_size);
    if (absl::Status read = data_plane::ReadFull(fd, bytes.data() + prefix_size,
                                                 bytes.size() - prefix_size, what);
        !read.ok()) {
      end.status = absl::UnavailableError(read.message());
      return end;
    }
    if (header->kind == data_plane::kStatus) {
      absl::Status ended = data_plane::ParseStatusPayload(
          absl::string_view(bytes.data(), bytes.size()));
      end.status = ended.ok() ? ended
                              : absl::Status(ended.code(), absl::StrCat(what, ": ", ended.message()));
      return end;
    }
    end.received = true;
    absl::Status decoded = DecodePartitionValues(absl::string_view(bytes.data(), bytes.size()),
                                                 &received, &values);
    Store(lane, decoded, received, values);
  }
}

void PsClient::ReadLoop(Lane* lane) {
  ReceivedMessage received;  // Swapped with the partition's, so buffers are reused.
  PartitionValuesView values;
  absl::Time unreachable_since = absl::InfiniteFuture();
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  absl::Status connect_error;  // Why the lane is not connected.
  while (true) {
    bool connected, tcp;
    {
      absl::MutexLock lock(&lane->write_mu);
      connected = lane->connected;
      tcp = lane->tcp;
    }
    ReadEnd end;
    if (!connected) {
      end.status = connect_error.ok()
                       ? absl::UnavailableError(absl::StrCat(LaneName(*lane), ": not connected"))
                       : connect_error;
    } else {
      end = tcp ? ReadTcp(*lane, received, values) : ReadGrpc(*lane, received, values);
    }
    if (end.received) {
      unreachable_since = absl::InfiniteFuture();
      backoff.Reset();
    }
    bool switching;  // The prober ended the stream to move the lane to the data plane.
    {
      absl::MutexLock lock(&lane->fd_mu);
      switching = lane->probed_fd >= 0;
    }
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      if (!switching && !Retryable(end.status)) {
        if (failure_.ok()) failure_ = end.status;
        return;
      }
    }
    {
      absl::MutexLock lock(&lane->write_mu);
      lane->connected = false;
    }
    if (switching) {
      connect_error = ConnectLane(*lane);
      if (connect_error.ok()) {
        ++reconnects_;
        ResendAwaited(*lane);
      }
      continue;
    }
    // The stream broke: reconnect with backoff and send again what still awaits an update.
    if (unreachable_since == absl::InfiniteFuture()) unreachable_since = absl::Now();
    if (absl::Now() - unreachable_since > retry_budget_) {
      absl::MutexLock lock(&mu_);
      if (failure_.ok()) {
        failure_ = absl::UnavailableError(absl::StrCat(LaneName(*lane), " unreachable for ",
                                                       absl::FormatDuration(retry_budget_), ": ",
                                                       end.status.message()));
      }
      return;
    }
    LOG(WARNING) << end.status.message() << "; reconnecting in "
                 << absl::FormatDuration(backoff.Peek());
    absl::SleepFor(backoff.Next());
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
    }
    connect_error = ConnectLane(*lane);
    if (!connect_error.ok()) {
      if (!Retryable(connect_error)) {
        absl::MutexLock lock(&mu_);
        if (failure_.ok()) failure_ = connect_error;
        return;
      }
      continue;
    }
    ++reconnects_;
    ResendAwaited(*lane);
  }
}

void PsClient::ResendAwaited(Lane& lane) {
  std::vector<std::pair<uint32_t, Outgoing>> resend;
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t id : lane.partitions) {
      if (partitions_[id].awaiting) resend.emplace_back(id, partitions_[id].pushed);
    }
  }
  for (const auto& [id, push] : resend) WritePush(lane, id, push);
}

void PsClient::Interrupt(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = absl::AbortedError(reason);
  DropExpectationsLocked();
}

void PsClient::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    if (failure_.ok()) failure_ = absl::CancelledError("PS client closed");
  }
  closed_ = true;
  for (auto& lane : lanes_) {  // A connection the prober is making, too.
    absl::MutexLock lock(&lane->fd_mu);
    if (lane->opening != nullptr) lane->opening->TryCancel();
    if (lane->connecting_fd >= 0) ::shutdown(lane->connecting_fd, SHUT_RDWR);
  }
  if (prober_.joinable()) prober_.join();  // It sees closing_.
  for (auto& lane : lanes_) {
    {
      // First the socket (this also ends a push blocked on it, which holds write_mu),
      // and a connection being made.
      absl::MutexLock lock(&lane->fd_mu);
      if (lane->fd >= 0) ::shutdown(lane->fd, SHUT_RDWR);
      if (lane->opening != nullptr) lane->opening->TryCancel();
      if (lane->connecting_fd >= 0) ::shutdown(lane->connecting_fd, SHUT_RDWR);
    }
    {
      absl::MutexLock lock(&lane->write_mu);
      if (lane->context != nullptr) lane->context->TryCancel();
    }
    if (lane->reader.joinable()) lane->reader.join();
    {
      absl::MutexLock lock(&mu_);
      DropExpectationsLocked();
    }
    absl::MutexLock lock(&lane->write_mu);
    absl::MutexLock fd_lock(&lane->fd_mu);
    if (lane->fd >= 0) {
      ::close(lane->fd);
      lane->fd = -1;
      --tcp_lanes_;
    }
    if (lane->probed_fd >= 0) {
      ::close(lane->probed_fd);
      lane->probed_fd = -1;
    }
    lane->connected = false;
  }
}

}  // namespace tributary::worker
