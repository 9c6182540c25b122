// PushPull over the shard's data plane (common/data_plane_wire.h): a ticket from
// OpenDataPlane, a connection admitted with it, then frames. The connection is to the
// shard's local socket when it announced one and it is in reach (the same network
// namespace: the same host or pod) and proves it issued the ticket, else to its TCP
// data port. A push
// is one sendmsg from the caller's buffer; an awaited update is received straight
// into its destination in the parameters when a DirectReceiver claims it.
// On the local socket the lane may also hand the shard a shared memory region
// (common/shared_region.h) with a push slot and an update slot for each of the shard's
// partitions: a push is then one memcpy into its slot and a small frame, and an update
// one memcpy out of its slot. Or it hands over the node's region, which holds the
// worker's parameters and gradients themselves (TrainingSession): a push whose data
// lies there is a small frame naming where, and an update expected into the parameters
// is written there by the shard, no copy on the worker's side either way.
#ifndef TRIBUTARY_WORKER_COMM_TCP_LANE_H_
#define TRIBUTARY_WORKER_COMM_TCP_LANE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shared_region.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/comm/ps_connection.h"
#include "worker/comm/push_pull_lane.h"

namespace tributary::worker {

// Whose fault a failed TcpLane::Connect is.
enum class DataPlaneTrouble {
  kNone,              // None, or the shard runs no data plane (FAILED_PRECONDITION).
  kShardUnreachable,  // OpenDataPlane itself got no answer: retry later.
  kRefused,           // The shard refused the caller (credentials, job id).
  kDataPort,          // The data port, its admission or the tickets failed it.
};

class TcpLane : public PushPullLane {
 public:
  // Whether to use the shard's local socket (the worker's --ps_transport).
  enum class Local {
    kFirst,  // When in reach, else the TCP port.
    kNever,  // The TCP port only.
    kOnly,   // The local socket only: out of reach is an error.
  };
  struct Target {
    v1::ParameterServer::Stub* stub = nullptr;  // The shard's control service.
    std::string address;                        // host:port of that service.
    std::string name;                           // For errors: "PS shard 0 at host:port".
    const PsIdentity* identity = nullptr;
    uint64_t max_values_frame = 0;  // Largest update frame accepted.
    absl::Duration send_timeout;    // A shard that stops reading fails a push after this.
    Local local = Local::kFirst;
    // The network namespace the shard's proof must name (tests play a worker in
    // another one); empty: this process's (data_plane::LocalNamespaceId).
    std::string namespace_id;
    // On the local socket: a shared region with these partitions' slots (id, the most
    // bytes a push or an update of it takes); empty: none (the worker's
    // --ps_shared_memory=false, or not the local socket).
    std::vector<std::pair<uint32_t, uint64_t>> shared_partitions;
    // On the local socket: the node's region (PsClient's node_region), offered instead
    // of a region of slots; null: none.
    std::shared_ptr<SharedRegion> node_region;
  };
  // Where a partition's push and update lie in a shared region.
  struct SharedSlot {
    bool present = false;
    uint64_t push_offset = 0;
    uint64_t values_offset = 0;
    uint64_t bytes = 0;
  };
  // A region's slots for `partitions` (by id) and its size, in *bytes.
  static std::vector<SharedSlot> LayOutShared(
      const std::vector<std::pair<uint32_t, uint64_t>>& partitions, uint64_t* bytes);
  // OpenDataPlane on the shard, the TCP connection to its data port and the hello
  // with the ticket, answered by the shard. `abort` cuts it short from another
  // thread; `direct` (may be null) is asked where updates may land.
  static absl::StatusOr<std::unique_ptr<TcpLane>> Connect(const Target& target,
                                                          ConnectAbort& abort,
                                                          DirectReceiver* direct,
                                                          DataPlaneTrouble* trouble);
  // A lane over a connection admitted already (Connect's last step; tests use a
  // socketpair). Takes the descriptor.
  static std::unique_ptr<TcpLane> Adopt(int fd, const std::string& name,
                                        uint64_t max_values_frame, DirectReceiver* direct,
                                        bool local = false);
  // The same with a shared region the shard accepted (its slots by partition id; none
  // for a node region).
  static std::unique_ptr<TcpLane> AdoptShared(int fd, const std::string& name,
                                              uint64_t max_values_frame, DirectReceiver* direct,
                                              std::shared_ptr<SharedRegion> region,
                                              std::vector<SharedSlot> slots);
  // Hands a fresh region for `partitions` to the shard at the other end of `fd` (the
  // lane's first frame) and waits for its answer: the region and its slots when the shard
  // mapped it; FAILED_PRECONDITION with the shard's reason when it refused (the
  // connection goes on without one); UNAVAILABLE when the connection failed.
  static absl::StatusOr<std::pair<SharedRegion, std::vector<SharedSlot>>> OfferShared(
      int fd, const std::vector<std::pair<uint32_t, uint64_t>>& partitions,
      absl::Duration timeout);
  // Hands `region` (its descriptor stays open: a node region goes to every shard, and
  // again after a reconnect) to the shard at the other end of `fd` and waits for its
  // answer; the same errors as OfferShared.
  static absl::Status OfferRegion(int fd, const SharedRegion& region, absl::Duration timeout);
  ~TcpLane() override;

  bool is_tcp() const override { return true; }
  bool is_local() const override { return local_; }
  bool is_shared() const override { return region_ != nullptr; }
  // Through the shared region when there is one and the data lies in it (sent from
  // there) or in a slot of its partition (copied there), else inline. The shard is asked
  // to write the update at `answer` when the region holds it, else in the partition's
  // update slot if any, else inline.
  bool Write(const PushHeader& header, const char* data, size_t bytes,
             AnswerInto answer) override;
  LaneRead Read(ReceivedMessage& received, PartitionValuesView& values,
                absl::Status* status) override;
  void Shutdown() override;

 private:
  TcpLane(int fd, std::string what, uint64_t max_values_frame, DirectReceiver* direct, bool local)
      : fd_(fd),
        what_(std::move(what)),
        max_values_frame_(max_values_frame),
        direct_(direct),
        local_(local) {}
  // The awaited update whose frame header was read: its data straight into `into`.
  LaneRead ReceiveDirect(const char* prefix, size_t prefix_size, size_t data_offset,
                         uint64_t message_size, const PartitionValuesView& head, float* into,
                         absl::Status* status);
  // A kShared update of `length` payload bytes: its data out of the region.
  LaneRead ReadShared(uint64_t length, ReceivedMessage& received, PartitionValuesView& values,
                      absl::Status* status);

  const int fd_;
  const std::string what_;  // "PushPull to <name> (data plane)"
  const uint64_t max_values_frame_;
  DirectReceiver* const direct_;
  const bool local_;
  // Where `bytes` at `at` lie in region_ (which must be set), if they do.
  std::optional<uint64_t> OffsetInRegion(const void* at, size_t bytes) const;

  std::shared_ptr<SharedRegion> region_;  // Null: none.
  std::vector<SharedSlot> shared_;        // By partition id (none in a node region).
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_TCP_LANE_H_
