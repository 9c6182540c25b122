// Keeps a node leader's PushPull lanes to the parameter server shards connected:
// `streams_per_shard` lanes per shard, each on its own connection when there are
// several, each with a reader thread that hands every update to its Owner and, when
// the lane's connection breaks, connects a new lane (with backoff, within the retry
// budget) and asks the Owner to send again what still awaits an update. With
// PsTransport::kAuto a lane that fell back to gRPC because the shard's data port failed
// it moves back to the data plane once that answers (the prober thread).
// How a lane is made is a LaneFactory: the network's (gRPC stream, TCP data plane) by
// default; lane_keeper_test passes lanes in memory to break and restore them.
#ifndef TRIBUTARY_WORKER_COMM_LANE_KEEPER_H_
#define TRIBUTARY_WORKER_COMM_LANE_KEEPER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "common/partition_codec.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/comm/ps_connection.h"
#include "worker/comm/push_pull_lane.h"
#include "worker/comm/tcp_lane.h"

namespace tributary::worker {

// How PushPull's messages travel (the worker's --ps_transport).
enum class PsTransport {
  kAuto,   // The shard's data plane when it runs one (OpenDataPlane): its local socket
           // when in reach (the same network namespace), else its TCP port; else gRPC.
  kLocal,  // The data plane's local socket only: a shard out of reach is an error.
  kTcp,    // The data plane's TCP port only (never the local socket, nor gRPC).
  kGrpc,   // The gRPC PushPull stream.
};

// Whether `transport` speaks only the data plane (no fallback to gRPC).
inline bool DataPlaneOnly(PsTransport transport) {
  return transport == PsTransport::kLocal || transport == PsTransport::kTcp;
}

class LaneKeeper {
 public:
  // What the lanes report to (PsClient), from their reader threads.
  class Owner {
   public:
    virtual ~Owner() = default;
    // An update read on the lane named `lane` (decoded: whether it decoded).
    virtual void OnUpdate(const std::string& lane, absl::Status decoded,
                          ReceivedMessage& received, PartitionValuesView& values) = 0;
    // A new lane carries these partitions: write again every push of them still
    // awaiting its update (through LaneKeeper::Write).
    virtual void Reconnected(const std::vector<uint32_t>& partitions) = 0;
    // A lane can go on no more (a refusal, unreachable past the budget).
    virtual void Failed(absl::Status status) = 0;
  };
  struct ShardLink {
    uint32_t index = 0;
    std::string address;
    v1::ParameterServer::Stub* stub = nullptr;  // Null: no channel.
    std::vector<uint32_t> partitions;          // Owned by the shard, in plan order.
  };
  // Where one lane goes: its shard and its place among all the lanes.
  struct LaneSpot {
    size_t slot = 0;  // 0 .. shards * streams_per_shard - 1, shard by shard.
    const ShardLink* shard = nullptr;
    std::string name;  // "PS shard 0 at host:port (stream 2 of 4)", for logs and errors.
  };
  // Makes lanes. Called from Open, the readers and the prober, for different slots at
  // once (one call at a time per slot).
  class LaneFactory {
   public:
    virtual ~LaneFactory() = default;
    // A lane on the shard's TCP data plane, or the error and, in *trouble, whose
    // fault it is (which decides between retrying, failing and speaking gRPC).
    // `abort` cuts a connection being made short when the keeper closes.
    virtual absl::StatusOr<std::unique_ptr<PushPullLane>> DataPlane(const LaneSpot& spot,
                                                                    ConnectAbort& abort,
                                                                    DataPlaneTrouble* trouble) = 0;
    // A lane on the shard's gRPC PushPull stream.
    virtual absl::StatusOr<std::unique_ptr<PushPullLane>> Grpc(const LaneSpot& spot) = 0;
  };
  struct Options {
    PsTransport transport = PsTransport::kAuto;
    int streams_per_shard = 1;
    absl::Duration retry_budget;
    absl::Duration first_data_plane_retry;
    absl::Duration max_data_plane_retry;
    uint64_t max_values_frame = 0;  // Largest update frame accepted on the data plane.
    ChannelOptions channel_options;
    // Hand each local-socket lane a shared memory region for its shard's partitions
    // (TcpLane::Target::shared_partitions), whose bytes a push or update of each
    // partition takes at most: partition_bytes, by id.
    bool shared_memory = false;
    std::vector<uint64_t> partition_bytes;
    // With shared_memory: the node's region (TcpLane::Target::node_region) offered to
    // every local-socket lane instead of a region of slots per lane.
    std::shared_ptr<SharedRegion> node_region;
  };

  // `direct` (may be null) is asked where updates may land (TcpLane). `lanes` null: the
  // network's lanes, over channels made from options.channel_options.
  LaneKeeper(const PsIdentity& identity, const std::vector<ShardLink>& shards,
             uint32_t num_partitions, Options options, Owner& owner, DirectReceiver* direct,
             std::unique_ptr<LaneFactory> lanes = nullptr);
  ~LaneKeeper();
  LaneKeeper(const LaneKeeper&) = delete;
  LaneKeeper& operator=(const LaneKeeper&) = delete;

  // Connects every lane and starts the readers (and, with kAuto, the prober).
  absl::Status Open();
  // Whether a lane carries the partition (its shard is in the shard map).
  bool Carries(uint32_t partition) const;
  // Writes one push on the partition's lane (`answer`: PushPullLane::Write); false when
  // it was not written (no lane now, or a broken connection: the reader reconnects and
  // Reconnected follows).
  bool Write(uint32_t partition, const PushHeader& header, const char* data, size_t bytes,
             AnswerInto answer = {});
  // Shuts every lane down and joins the threads. Idempotent.
  void Close();

  // Before Open: see PsClient::set_data_plane_retry.
  void set_first_data_plane_retry(absl::Duration first) {
    options_.first_data_plane_retry = first;
  }
  int reconnects() const { return reconnects_; }
  int tcp_lanes() const { return tcp_lanes_; }
  // Of those, the lanes on a shard's local socket.
  int local_lanes() const { return local_lanes_; }
  // Of those, the lanes whose bytes go through a shared region.
  int shared_lanes() const { return shared_lanes_; }

 private:
  struct Slot;

  absl::Status ConnectLane(Slot& slot);
  // The data plane for the slot, where the transport allows it: null to speak gRPC,
  // or the error to return.
  absl::StatusOr<std::unique_ptr<PushPullLane>> ConnectTcp(Slot& slot, DataPlaneTrouble* trouble);
  // Puts `lane` in the slot in place of the lane there (null: none).
  void Install(Slot& slot, std::unique_ptr<PushPullLane> lane, DataPlaneTrouble trouble);
  void ReadLoop(Slot* slot);
  // Reads the lane until its stream ends: how it ended; *any when an update came.
  absl::Status ReadUntilEnd(Slot& slot, PushPullLane& lane, ReceivedMessage& received,
                            PartitionValuesView& values, bool* any);
  void ProbeLoop();
  void Probe(Slot& slot);
  bool closing();

  Options options_;
  Owner& owner_;
  std::unique_ptr<LaneFactory> lanes_;
  std::vector<std::unique_ptr<Slot>> slots_;  // streams_per_shard per shard, in order.
  std::vector<Slot*> slot_of_;               // By partition id.
  std::thread prober_;

  absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> closed_{false};  // Close() began: a new lane is shut down at once.
  std::atomic<int> reconnects_{0};
  std::atomic<int> tcp_lanes_{0};
  std::atomic<int> local_lanes_{0};
  std::atomic<int> shared_lanes_{0};
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_LANE_KEEPER_H_
