#include "worker/comm/lane_keeper.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/thread_name.h"
#include "common/thread_slice.h"
#include "worker/comm/grpc_lane.h"

namespace tributary::worker {

// Where one lane runs. The lane in it is replaced when its connection breaks (by the
// slot's reader only).
struct LaneKeeper::Slot {
  LaneSpot spot;
  const std::string& name() const { return spot.name; }
  std::vector<uint32_t> partitions;

  // Guards writes to the lane, and the lane against being replaced while a push is
  // written. The lane is replaced only under both mutexes, so that Close() may shut
  // it down under lane_mu while a push blocked on it holds write_mu.
  absl::Mutex write_mu;
  absl::Mutex lane_mu;
  std::unique_ptr<PushPullLane> lane;  // Null: not connected.
  // A data-plane lane the prober connected for a slot on gRPC, for the reader to take
  // (under lane_mu).
  std::unique_ptr<PushPullLane> probed;
  ConnectAbort abort;      // Close() cuts a connection being made short.
  absl::Mutex connect_mu;  // One TcpLane::Connect at a time (the reader's, the prober's).
  bool warned_fallback = false;
  // `auto` on gRPC because the data port failed it: when to try it again, and the
  // wait after that (under write_mu).
  bool fell_back = false;
  absl::Time next_probe = absl::InfiniteFuture();
  absl::Duration probe_wait;
  std::thread reader;
};

namespace {

bool Retryable(const absl::Status& status) {
  // UNAVAILABLE: the shard went away (restart, network); CANCELLED/ABORTED/INTERNAL:
  // the transport broke the stream. A refusal (FAILED_PRECONDITION, INVALID_ARGUMENT)
  // is not retried: it is the shard's answer.
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

// The lanes over the network: a gRPC channel per lane (each on its own connection
// when a shard has several lanes: one connection's throughput is what a single TCP
// stream and gRPC's one thread per read and write can do), and the shard's data
// plane.
class NetworkLanes : public LaneKeeper::LaneFactory {
 public:
  NetworkLanes(const PsIdentity& identity, const std::vector<LaneKeeper::ShardLink>& shards,
               const LaneKeeper::Options& options, DirectReceiver* direct)
      : identity_(identity), options_(options), direct_(direct) {
    const int streams = std::max(1, options.streams_per_shard);
    ChannelOptions lane_options = options.channel_options;
    lane_options.own_connection = lane_options.own_connection || streams > 1;
    for (const LaneKeeper::ShardLink& shard : shards) {
      for (int number = 0; number < streams; ++number) {
        absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
            MakeChannel(shard.address, lane_options);
        channels_.push_back(channel.ok() ? *channel : nullptr);
      }
    }
  }

  absl::StatusOr<std::unique_ptr<PushPullLane>> DataPlane(const LaneKeeper::LaneSpot& spot,
                                                          ConnectAbort& abort,
                                                          DataPlaneTrouble* trouble) override {
    *trouble = DataPlaneTrouble::kNone;
    if (!HasChannel(spot)) {
      *trouble = DataPlaneTrouble::kRefused;  // Not a data-plane trouble: no fallback.
      return NoChannel(spot);
    }
    TcpLane::Target target;
    target.stub = spot.shard->stub;
    target.address = spot.shard->address;
    target.name = spot.name;
    target.identity = &identity_;
    target.max_values_frame = options_.max_values_frame;
    target.send_timeout = options_.retry_budget;
    target.local = options_.transport == PsTransport::kLocal  ? TcpLane::Local::kOnly
                   : options_.transport == PsTransport::kTcp ? TcpLane::Local::kNever
                                                             : TcpLane::Local::kFirst;
    if (options_.shared_memory && options_.node_region != nullptr) {
      target.node_region = options_.node_region;
    } else if (options_.shared_memory) {
      for (uint32_t id : spot.shard->partitions) {
        if (id < options_.partition_bytes.size()) {
          target.shared_partitions.emplace_back(id, options_.partition_bytes[id]);
        }
      }
    }
    absl::StatusOr<std::unique_ptr<TcpLane>> tcp =
        TcpLane::Connect(target, abort, direct_, trouble);
    if (!tcp.ok()) return tcp.status();
    return std::unique_ptr<PushPullLane>(std::move(*tcp));
  }

  absl::StatusOr<std::unique_ptr<PushPullLane>> Grpc(const LaneKeeper::LaneSpot& spot) override {
    if (!HasChannel(spot)) return NoChannel(spot);
    absl::StatusOr<std::unique_ptr<GrpcLane>> grpc =
        GrpcLane::Open(*channels_[spot.slot], identity_.node_credential, spot.name);
    if (!grpc.ok()) return grpc.status();
    return std::unique_ptr<PushPullLane>(std::move(*grpc));
  }

 private:
  // Both the shard's stub (OpenDataPlane) and the lane's channel exist: the shard's
  // address made a channel.
  bool HasChannel(const LaneKeeper::LaneSpot& spot) const {
    return spot.shard->stub != nullptr && spot.slot < channels_.size() &&
           channels_[spot.slot] != nullptr;
  }
  static absl::Status NoChannel(const LaneKeeper::LaneSpot& spot) {
    return absl::InvalidArgumentError(absl::StrCat(spot.name, ": no channel"));
  }

  const PsIdentity& identity_;
  const LaneKeeper::Options options_;
  DirectReceiver* const direct_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;  // By slot; null: none.
};

}  // namespace

LaneKeeper::LaneKeeper(const PsIdentity& identity, const std::vector<ShardLink>& shards,
                       uint32_t num_partitions, Options options, Owner& owner,
                       DirectReceiver* direct, std::unique_ptr<LaneFactory> lanes)
    : options_(std::move(options)),
      owner_(owner),
      lanes_(lanes != nullptr ? std::move(lanes)
                              : std::make_unique<NetworkLanes>(identity, shards, options_, direct)),
      slot_of_(num_partitions, nullptr) {
  const int streams = std::max(1, options_.streams_per_shard);
  for (const ShardLink& shard : shards) {
    const size_t first = slots_.size();
    for (int number = 0; number < streams; ++number) {
      auto slot = std::make_unique<Slot>();
      slot->spot.slot = slots_.size();
      slot->spot.shard = &shard;
      slot->spot.name = absl::StrCat("PS shard ", shard.index, " at ", shard.address);
      if (streams > 1) {
        absl::StrAppend(&slot->spot.name, " (stream ", number + 1, " of ", streams, ")");
      }
      slots_.push_back(std::move(slot));
    }
    for (size_t i = 0; i < shard.partitions.size(); ++i) {
      Slot* slot = slots_[first + i % streams].get();
      slot->partitions.push_back(shard.partitions[i]);
      if (shard.partitions[i] < num_partitions) slot_of_[shard.partitions[i]] = slot;
    }
  }
}

LaneKeeper::~LaneKeeper() { Close(); }

bool LaneKeeper::Carries(uint32_t partition) const {
  return partition < slot_of_.size() && slot_of_[partition] != nullptr;
}

bool LaneKeeper::closing() {
  absl::MutexLock lock(&mu_);
  return closing_;
}

absl::StatusOr<std::unique_ptr<PushPullLane>> LaneKeeper::ConnectTcp(Slot& slot,
                                                                     DataPlaneTrouble* trouble) {
  *trouble = DataPlaneTrouble::kNone;
  if (options_.transport == PsTransport::kGrpc) return nullptr;
  absl::StatusOr<std::unique_ptr<PushPullLane>> tcp;
  {
    absl::MutexLock connecting(&slot.connect_mu);
    tcp = lanes_->DataPlane(slot.spot, slot.abort, trouble);
  }
  if (tcp.ok()) return tcp;
  // The shard not answering is retried later, a refusal of the caller returned; `tcp`
  // returns the rest too (UNAVAILABLE: retried), while `auto` speaks gRPC to a shard
  // that runs no data plane or whose data port fails it.
  if (*trouble == DataPlaneTrouble::kShardUnreachable || *trouble == DataPlaneTrouble::kRefused ||
      DataPlaneOnly(options_.transport) || closed_.load()) {
    return tcp.status();
  }
  if (!slot.warned_fallback) {
    LOG(WARNING) << slot.name() << ": " << tcp.status().message() << "; PushPull goes over gRPC";
    slot.warned_fallback = true;
  }
  return nullptr;
}

absl::Status LaneKeeper::ConnectLane(Slot& slot) {
  std::unique_ptr<PushPullLane> lane;
  DataPlaneTrouble trouble = DataPlaneTrouble::kNone;
  {
    absl::MutexLock lock(&slot.lane_mu);
    lane = std::move(slot.probed);  // The prober's connection, admitted already.
  }
  if (lane == nullptr) {
    absl::StatusOr<std::unique_ptr<PushPullLane>> tcp = ConnectTcp(slot, &trouble);
    if (!tcp.ok()) return tcp.status();
    lane = std::move(*tcp);
  }
  if (lane == nullptr) {
    absl::StatusOr<std::unique_ptr<PushPullLane>> grpc = lanes_->Grpc(slot.spot);
    if (!grpc.ok()) return grpc.status();
    lane = std::move(*grpc);
  }
  Install(slot, std::move(lane), trouble);
  return absl::OkStatus();
}

void LaneKeeper::Install(Slot& slot, std::unique_ptr<PushPullLane> lane,
                         DataPlaneTrouble trouble) {
  absl::MutexLock lock(&slot.write_mu);
  const bool tcp = lane != nullptr && lane->is_tcp();
  {
    absl::MutexLock lane_lock(&slot.lane_mu);
    if (slot.lane != nullptr && slot.lane->is_tcp()) --tcp_lanes_;
    if (slot.lane != nullptr && slot.lane->is_local()) --local_lanes_;
    if (slot.lane != nullptr && slot.lane->is_shared()) --shared_lanes_;
    slot.lane = std::move(lane);  // The lane it replaces ends here.
    if (tcp) ++tcp_lanes_;
    if (slot.lane != nullptr && slot.lane->is_local()) ++local_lanes_;
    if (slot.lane != nullptr && slot.lane->is_shared()) ++shared_lanes_;
    if (closed_.load() && slot.lane != nullptr) slot.lane->Shutdown();
  }
  if (slot.lane == nullptr) return;  // The probing state stays for the next lane.
  LOG(INFO) << slot.spot.name << ": "
            << (!tcp                     ? "gRPC PushPull stream"
                : slot.lane->is_shared() ? "local data plane, bytes through shared memory"
                : slot.lane->is_local()  ? "local data plane"
                                         : "TCP data plane");
  // On gRPC because the data port failed it: try it again later (ProbeLoop).
  const bool fell_back = !tcp && trouble == DataPlaneTrouble::kDataPort;
  if (fell_back && !slot.fell_back) slot.probe_wait = options_.first_data_plane_retry;
  slot.fell_back = fell_back;
  slot.next_probe = fell_back ? absl::Now() + slot.probe_wait : absl::InfiniteFuture();
}

void LaneKeeper::ProbeLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&closing_), absl::Milliseconds(100))) return;
    }
    for (auto& slot : slots_) Probe(*slot);
  }
}

void LaneKeeper::Probe(Slot& slot) {
  {
    absl::MutexLock lock(&slot.write_mu);
    if (!slot.fell_back || slot.lane == nullptr || slot.lane->is_tcp() ||
        absl::Now() < slot.next_probe) {
      return;
    }
    slot.next_probe = absl::InfiniteFuture();  // One try at a time.
  }
  DataPlaneTrouble trouble;
  absl::StatusOr<std::unique_ptr<PushPullLane>> tcp = ConnectTcp(slot, &trouble);
  absl::MutexLock lock(&slot.write_mu);
  if (!tcp.ok() || *tcp == nullptr) {
    slot.probe_wait = std::min(2 * slot.probe_wait, options_.max_data_plane_retry);
    if (slot.fell_back) slot.next_probe = absl::Now() + slot.probe_wait;
    LOG(INFO) << slot.name() << ": the data plane still fails ("
              << (tcp.ok() ? "no data plane" : tcp.status().message()) << "); next try in "
              << absl::FormatDuration(slot.probe_wait);
    return;
  }
  absl::MutexLock lane_lock(&slot.lane_mu);
  if (closed_.load() || !slot.fell_back || slot.lane == nullptr || slot.lane->is_tcp() ||
      slot.probed != nullptr) {
    return;  // Not wanted any more: the connection closes here.
  }
  LOG(INFO) << slot.name() << ": the data plane answers again; PushPull moves back to it";
  slot.probed = std::move(*tcp);
  // The reader sees the gRPC stream end, takes the connection and the pushes still
  // awaiting their update are sent again (the shard ignores exact duplicates).
  slot.lane->Shutdown();
}

absl::Status LaneKeeper::Open() {
  if (options_.transport == PsTransport::kAuto && !prober_.joinable()) {
    prober_ = std::thread([this] {
      NameThisThread("lane-probe");
      ProbeLoop();
    });
  }
  for (auto& slot : slots_) {
    // A shard not reachable yet is the reader's to reconnect to (with backoff, within
    // the retry budget); any other error is returned.
    if (absl::Status s = ConnectLane(*slot); !s.ok() && !Retryable(s)) return s;
    Slot* raw = slot.get();
    slot->reader = std::thread([this, raw] {
      NameHandoffThread("lane-read");
      ReadLoop(raw);
    });
  }
  return absl::OkStatus();
}

bool LaneKeeper::Write(uint32_t partition, const PushHeader& header, const char* data,
                       size_t bytes, AnswerInto answer) {
  if (!Carries(partition)) return false;
  Slot& slot = *slot_of_[partition];
  absl::MutexLock lock(&slot.write_mu);
  return slot.lane != nullptr && slot.lane->Write(header, data, bytes, answer);
}

absl::Status LaneKeeper::ReadUntilEnd(Slot& slot, PushPullLane& lane, ReceivedMessage& received,
                                      PartitionValuesView& values, bool* any) {
  while (true) {
    absl::Status status;
    switch (lane.Read(received, values, &status)) {
      case LaneRead::kMessage:
        *any = true;
        owner_.OnUpdate(slot.name(), status, received, values);
        break;
      case LaneRead::kLanded:
        *any = true;
        break;
      case LaneRead::kEnded:
        return status;
    }
  }
}

void LaneKeeper::ReadLoop(Slot* slot) {
  ReceivedMessage received;  // Swapped with the partition's, so buffers are reused.
  PartitionValuesView values;
  absl::Time unreachable_since = absl::InfiniteFuture();
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  absl::Status connect_error;  // Why the slot has no lane.
  while (true) {
    PushPullLane* lane;  // Replaced by this thread only: used without the lock.
    {
      absl::MutexLock lock(&slot->write_mu);
      lane = slot->lane.get();
    }
    absl::Status ended;
    bool any = false;
    if (lane == nullptr) {
      ended = connect_error.ok() ? absl::UnavailableError(slot->name() + ": not connected")
                                 : connect_error;
    } else {
      ended = ReadUntilEnd(*slot, *lane, received, values, &any);
    }
    if (any) {
      unreachable_since = absl::InfiniteFuture();
      backoff.Reset();
    }
    bool switching;  // The prober ended the stream to move the slot to the data plane.
    {
      absl::MutexLock lock(&slot->lane_mu);
      switching = slot->probed != nullptr;
    }
    if (closing()) return;
    if (!switching && !Retryable(ended)) {
      owner_.Failed(ended);
      return;
    }
    Install(*slot, nullptr, DataPlaneTrouble::kNone);
    if (!switching) {
      // The stream broke: reconnect with backoff and send again what still awaits an
      // update.
      if (unreachable_since == absl::InfiniteFuture()) unreachable_since = absl::Now();
      if (absl::Now() - unreachable_since > options_.retry_budget) {
        owner_.Failed(absl::UnavailableError(
            absl::StrCat(slot->name(), " unreachable for ",
                         absl::FormatDuration(options_.retry_budget), ": ", ended.message())));
        return;
      }
      LOG(WARNING) << ended.message() << "; reconnecting in "
                   << absl::FormatDuration(backoff.Peek());
      absl::SleepFor(backoff.Next());
      if (closing()) return;
    }
    connect_error = ConnectLane(*slot);
    if (!connect_error.ok()) {
      if (!Retryable(connect_error)) {
        owner_.Failed(connect_error);
        return;
      }
      continue;
    }
    ++reconnects_;
    owner_.Reconnected(slot->partitions);
  }
}

void LaneKeeper::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  closed_ = true;
  for (auto& slot : slots_) slot->abort.Abort();  // A connection the prober is making, too.
  if (prober_.joinable()) prober_.join();          // It sees closing_.
  for (auto& slot : slots_) {
    {
      // This also ends a push blocked on the lane, which holds write_mu.
      absl::MutexLock lock(&slot->lane_mu);
      if (slot->lane != nullptr) slot->lane->Shutdown();
    }
    if (slot->reader.joinable()) slot->reader.join();
    Install(*slot, nullptr, DataPlaneTrouble::kNone);
    absl::MutexLock lock(&slot->lane_mu);
    slot->probed.reset();
  }
}

}  // namespace tributary::worker
