// One PushPull connection from a node leader to a parameter server shard, whatever
// carries it: GrpcLane (grpc_lane.h, the gRPC PushPull stream) or TcpLane
// (tcp_lane.h, the shard's TCP data plane). The worker's side of the server's
// service / data-plane split. PsClient (ps_client.h) owns the lanes, replaces one
// whose connection broke and keeps the partitions' state; a lane only moves bytes.
//
//   std::unique_ptr<PushPullLane> lane = ...;   // GrpcLane::Open or TcpLane::Connect
//   lane->Write(header, data, bytes);          // any thread, one at a time
//   while (lane->Read(received, values, &status) != LaneRead::kEnded) { ... }  // reader
//   lane->Shutdown();                          // any thread: Read and Write return
#ifndef TRIBUTARY_WORKER_COMM_PUSH_PULL_LANE_H_
#define TRIBUTARY_WORKER_COMM_PUSH_PULL_LANE_H_

#include <grpcpp/client_context.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/partition_codec.h"

namespace tributary::worker {

// What PushPullLane::Read found.
enum class LaneRead {
  kMessage,  // An update, in the received message and its view (status: whether it decoded).
  kLanded,   // An update received straight into a DirectReceiver's destination.
  kEnded,    // The stream ended (status: how; OK when the shard finished it).
};

class PushPullLane;

// Where the update answering a push is expected (PsConnection::ExpectUpdateInto): `bytes`
// at `data`, the partition's values; none when data is null. A lane whose shared region
// holds that place asks the shard to write the update there (TcpLane).
struct AnswerInto {
  float* data = nullptr;
  size_t bytes = 0;
};

// Where an update may be received straight into (PsConnection::ExpectUpdateInto),
// asked by a lane that can (TcpLane) once it has read the head of a message.
class DirectReceiver {
 public:
  virtual ~DirectReceiver() = default;
  // The destination for the update with this head and data_bytes of data, marked as
  // being received into from `lane` until Landed; null to receive it as a message.
  virtual float* Claim(PushPullLane& lane, const PartitionValuesView& head,
                       uint64_t data_bytes) = 0;
  // The receive Claim allowed has ended: OK with the data at the destination, or how
  // the read failed (the lane's Read then ends the stream). in_place: the shard wrote
  // it there itself (a node region), nothing was copied on this side.
  virtual void Landed(const PartitionValuesView& head, uint64_t data_bytes,
                      const absl::Status& read, bool in_place) = 0;
};

class PushPullLane {
 public:
  virtual ~PushPullLane() = default;
  // A data-plane lane (TcpLane), and whether it is on the shard's local socket.
  virtual bool is_tcp() const = 0;
  virtual bool is_local() const { return false; }
  // Whether its bytes travel through a region shared with the shard (TcpLane).
  virtual bool is_shared() const { return false; }

  // Sends one push: the header, then `bytes` of data from where they lie (they stay
  // the caller's; see PsConnection::Push for how long). `answer`: where its update is
  // expected, if anywhere. False when the connection broke: the reader's Read then
  // ends. Callers serialize their writes.
  virtual bool Write(const PushHeader& header, const char* data, size_t bytes,
                     AnswerInto answer) = 0;

  // Blocks for the next update (kMessage, kLanded) or the end of the stream
  // (kEnded). `received` and `values` are the reader's, reused from message to
  // message. One reader thread.
  virtual LaneRead Read(ReceivedMessage& received, PartitionValuesView& values,
                        absl::Status* status) = 0;

  // Ends the connection: a Read or a Write blocked on it returns. Any thread, any
  // number of times, while the lane exists.
  virtual void Shutdown() = 0;
};

// Lets another thread cut short a lane being connected: Close() while a reader or the
// prober waits on OpenDataPlane or on the data port's admission.
class ConnectAbort {
 public:
  // The call about to be made, for Abort to cancel; false when aborted already.
  bool BeginCall(grpc::ClientContext* call);
  void EndCall();
  // The socket waiting for admission, for Abort to shut down; false when aborted
  // already (the caller closes it).
  bool BeginAdmission(int fd);
  void EndAdmission();
  // Cancels what runs now and fails every later Begin.
  void Abort();
  bool aborted();

 private:
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  int admitting_fd_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_PUSH_PULL_LANE_H_
