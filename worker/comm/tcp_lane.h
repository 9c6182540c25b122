// PushPull over the shard's data plane (common/data_plane_wire.h): a ticket from
// OpenDataPlane, a connection admitted with it, then frames. The connection is to the
// shard's local socket when it announced one and it is in reach (the same network
// namespace: the same host or pod) and proves it issued the ticket, else to its TCP
// data port. A push
// is one sendmsg from the caller's buffer; an awaited update is received straight
// into its destination in the parameters when a DirectReceiver claims it.
#ifndef TRIBUTARY_WORKER_COMM_TCP_LANE_H_
#define TRIBUTARY_WORKER_COMM_TCP_LANE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
  };
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
  ~TcpLane() override;

  bool is_tcp() const override { return true; }
  bool is_local() const override { return local_; }
  bool Write(const PushHeader& header, const char* data, size_t bytes) override;
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

  const int fd_;
  const std::string what_;  // "PushPull to <name> (data plane)"
  const uint64_t max_values_frame_;
  DirectReceiver* const direct_;
  const bool local_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_TCP_LANE_H_
