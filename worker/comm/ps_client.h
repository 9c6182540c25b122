// The node leader's client of the parameter server shards, in ps-lite's three
// verbs: Push a partition's gradient sum, Pull current values, and Wait for a
// partition's update. One PushPull stream per shard, carrying raw messages
// (common/partition_codec.h): a push goes out from the caller's buffer without a
// copy, and an update is kept as the slices it arrived in until WaitUpdated writes it
// into the caller's parameters. Partitions complete independently.
//
//   PsClient ps(identity, plan, shards, channel_options, v1::SYNC, v1::FLOAT32);
//   ps.Open();
//   ps.Push(step, p, node_grad.data() + plan.partitions(p).offset(), samples, 1);  // per p
//   ps.WaitUpdated(p, step, timeout, params.data() + plan.partitions(p).offset());
#ifndef TRIBUTARY_WORKER_COMM_PS_CLIENT_H_
#define TRIBUTARY_WORKER_COMM_PS_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "common/partition_codec.h"
#include "proto/coordinator.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "worker/comm/ps_connection.h"

namespace tributary::worker {

// Who is pushing: from the worker's Assignment.
struct PsIdentity {
  std::string job_id;
  uint64_t generation = 0;
  uint32_t node_rank = 0;
  // The generation's node count and resume step, for InitPartitions: a shard that
  // holds no job installs it at this generation. 0 nodes: a tool outside any
  // generation (the shard then assumes the job's nodes_min).
  uint32_t num_nodes = 0;
  uint64_t resume_step = 0;
  // Assignment.node_credential, sent as x-tributary-node on InitPartitions and
  // PushPull when not empty.
  std::string node_credential;
};

// How PushPull's messages travel (the worker's --ps_transport).
enum class PsTransport {
  kAuto,  // The shard's TCP data plane when it runs one (OpenDataPlane), else gRPC.
  kTcp,   // The TCP data plane only: a shard without one is an error.
  kGrpc,  // The gRPC PushPull stream.
};
// "auto", "tcp", "grpc"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name);
const char* PsTransportName(PsTransport transport);

// How long InitPartitions and PullAll keep retrying a shard that answers UNAVAILABLE
// (not started yet, restarting), and how long a broken PushPull stream keeps
// reconnecting.
inline constexpr absl::Duration kDefaultPsRetryBudget = absl::Seconds(60);

class PsClient : public PsConnection {
 public:
  // plan: the job's partition plan; shards: the Assignment's shard map (index order).
  // streams_per_shard: PushPull streams to each shard, each on its own connection,
  // its partitions dealt among them in turn (at least 1).
  PsClient(PsIdentity identity, v1::PartitionPlan plan, std::vector<v1::ShardInfo> shards,
           ChannelOptions channel_options, v1::TrainingMode mode, v1::DType wire_dtype,
           absl::Duration retry_budget = kDefaultPsRetryBudget, int streams_per_shard = 1,
           PsTransport transport = PsTransport::kAuto);
  ~PsClient() override;
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Installs the job on every shard (idempotent on the PS side): the plan, the spec and
  // the initial values (params: the whole flat buffer). Returns the lowest step the
  // shards stand at (0 for a fresh job, more when they were already training).
  // A shard that answers UNAVAILABLE is retried with backoff (100 ms doubling to 2 s,
  // each retry logged) for up to the retry budget; any other error (a
  // FAILED_PRECONDITION refusal above all) is returned at once. Likewise PullAll.
  absl::StatusOr<uint64_t> InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                          const float* params) override;

  // Current values of every partition, written into params (the whole flat buffer).
  // Returns the lowest step they are for.
  absl::StatusOr<uint64_t> PullAll(float* params) override;

  // Opens the PushPull streams.
  absl::Status Open() override;

  // Sends partition p's gradient sum for `step` (see PsConnection::Push). `data`
  // points at the partition's first element and must stay unchanged until
  // WaitUpdated(p, step) returns: gRPC sends it from there (FLOAT32; a narrower wire
  // dtype is narrowed into the client's own buffer first), and after a reconnect it is
  // sent again (the shard ignores exact duplicates).
  absl::Status Push(uint64_t step, uint32_t partition, const float* data, uint64_t sample_count,
                    uint32_t steps) override;

  // On the TCP data plane (SYNC), the update of that push is received straight into
  // dst (PsConnection::ExpectUpdateInto); WaitUpdated then copies nothing. Every
  // expectation is dropped when a WaitUpdated fails or on Interrupt/Close, which wait
  // for a receive into dst in progress to end first.
  void ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) override;

  // Blocks until the update that followed our push for `step` arrived and writes it
  // into dst. FAILED_PRECONDITION when a shard refused the push as stale (a new
  // generation: re-rendezvous); DEADLINE_EXCEEDED after `timeout`.
  absl::Status WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                           float* dst) override;

  // Fails every wait, now and later, with ABORTED naming `reason`.
  void Interrupt(const std::string& reason) override;

  // Closes every stream (pending waits fail with CANCELLED).
  void Close() override;

  uint64_t bytes_pushed() const override { return bytes_pushed_; }
  uint64_t bytes_pulled() const override { return bytes_pulled_; }
  int reconnects() const { return reconnects_; }
  // Streams (lanes) connected now over the TCP data plane.
  int tcp_lanes() const { return tcp_lanes_; }
  // Updates received straight into an ExpectUpdateInto destination.
  uint64_t direct_updates() const { return direct_updates_; }
  // InitPartitions/PullAll attempts repeated after UNAVAILABLE, since construction.
  int rpc_retries() const { return rpc_retries_; }

  // `auto`: a stream that fell back to gRPC because the shard's data port failed it
  // (not because the shard runs none) tries the data plane again after this long,
  // doubling after each failed try up to kMaxDataPlaneRetry, and moves back to it
  // once it answers. Call before Open.
  void set_data_plane_retry(absl::Duration first) { first_data_plane_retry_ = first; }
  static constexpr absl::Duration kDefaultDataPlaneRetry = absl::Seconds(10);
  static constexpr absl::Duration kMaxDataPlaneRetry = absl::Minutes(10);
  const v1::PartitionPlan& plan() const { return plan_; }

 private:
  struct Shard;
  struct Lane;
  // A push as sent (and sent again after a reconnect).
  struct Outgoing {
    uint64_t step = 0;
    const char* data = nullptr;  // The wire bytes, where they lie.
    size_t bytes = 0;
    uint64_t samples = 0;
    uint32_t steps = 1;
  };
  struct PartitionState {
    bool awaiting = false;  // Pushed, update not yet received.
    Outgoing pushed;        // The latest push.
    // The latest values received, kept in the slices they arrived in.
    ReceivedMessage received;
    PartitionValuesView values;
    bool has_values = false;
    // ExpectUpdateInto: where the update of step expect_step may be received, whether
    // the reader is receiving into it now, and whether it did (values.data is then
    // empty: the update lies in expect_dst).
    float* expect_dst = nullptr;
    uint64_t expect_step = 0;
    bool receiving_direct = false;
    Lane* receiving_lane = nullptr;  // Where it is being received from.
    bool received_direct = false;
    float* received_at = nullptr;  // Where it was received.
  };

  // Runs `attempt` until it returns anything but UNAVAILABLE or the retry budget
  // (counted from the first attempt) runs out. The attempt's errors name the shard.
  absl::Status WithRetries(const std::function<absl::Status()>& attempt);
  absl::StatusOr<uint64_t> InitShard(Shard& shard, const v1::JobSpec& spec, uint64_t total_steps,
                                     const float* params);
  // One Pull from one shard into params; marks the partitions it sent in `seen`.
  absl::StatusOr<uint64_t> PullShard(Shard& shard, float* params, std::vector<bool>& seen);
  // Connects the lane: the TCP data plane or a gRPC stream, as transport_ says.
  absl::Status ConnectLane(Lane& lane);
  // OpenDataPlane on the lane's shard, then the TCP connection and its hello: the
  // connected socket. `trouble` says whose the failure is.
  enum class DataPlaneTrouble {
    kNone,              // None, or the shard runs no data plane (FAILED_PRECONDITION).
    kShardUnreachable,  // OpenDataPlane itself got no answer: retry later.
    kRefused,           // The shard refused the caller (credentials, job id).
    kDataPort,          // The data port, its admission or the tickets failed it.
  };
  absl::StatusOr<int> ConnectData(Lane& lane, DataPlaneTrouble* trouble);
  void ReadLoop(Lane* lane);
  // `auto`: tries the data plane again for lanes that fell back to gRPC, when due; on
  // success it hands the connection to the lane's reader and ends the gRPC stream.
  void ProbeLoop();
  struct ReadEnd {
    absl::Status status;     // How the stream ended (OK: the shard finished it).
    bool received = false;   // Whether any update came before.
  };
  ReadEnd ReadGrpc(Lane& lane, ReceivedMessage& received, PartitionValuesView& values);
  ReadEnd ReadTcp(Lane& lane, ReceivedMessage& received, PartitionValuesView& values);
  // An update read on `lane` (decoded: its status) into the partition's state.
  void Store(Lane& lane, absl::Status decoded, ReceivedMessage& received,
             PartitionValuesView& values);
  // Writes one push; a broken stream is the reader's to notice (it reconnects and
  // sends every push still awaiting its update again).
  void WritePush(Lane& lane, uint32_t partition, const Outgoing& push);
  // Writes again every push of the lane's partitions still awaiting its update (after
  // the lane reconnected).
  void ResendAwaited(Lane& lane);
  // Writes pulled values into params (Pull); an error for values that do not fit the plan.
  absl::Status StoreValues(const v1::PartitionValues& values, float* params);
  // The same check for an update: partition known, FLOAT32, the partition's length.
  absl::Status CheckValues(const PartitionValuesView& values) const;
  // Drops every expectation, after any receive into one has ended.
  void DropExpectationsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The partition's expected destination for an update with these fields, marked as
  // being received into; null when the update is not the awaited one or does not fit.
  float* DirectTargetLocked(Lane& lane, const PartitionValuesView& head, uint64_t data_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ShardName(const Shard& shard) const;
  std::string LaneName(const Lane& lane) const;

  const PsIdentity identity_;
  const v1::PartitionPlan plan_;
  const ChannelOptions channel_options_;
  const v1::TrainingMode mode_;
  const v1::DType wire_dtype_;
  const absl::Duration retry_budget_;
  const int streams_per_shard_;
  const PsTransport transport_;
  absl::Duration first_data_plane_retry_ = kDefaultDataPlaneRetry;
  std::thread prober_;  // ProbeLoop, with `auto`.
  uint64_t max_values_frame_ = 0;  // Largest update frame accepted on the data plane.
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // streams_per_shard_ per shard, in order.
  std::vector<Lane*> lane_of_;                // By partition id.
  // Pushes narrowed to a FLOAT16/BFLOAT16 wire dtype, one region per partition (at
  // the partition's offset, in wire bytes), sent from here.
  std::vector<char> narrowed_;

  absl::Mutex mu_;
  std::vector<PartitionState> partitions_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // Sticky: a refused push or a closed client.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_pulled_{0};
  std::atomic<int> reconnects_{0};
  std::atomic<int> rpc_retries_{0};
  std::atomic<int> tcp_lanes_{0};
  std::atomic<uint64_t> direct_updates_{0};
  std::atomic<bool> closed_{false};  // Close() began: a new connection is shut at once.
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_PS_CLIENT_H_
