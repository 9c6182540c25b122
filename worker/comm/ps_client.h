// The node leader's client of the parameter server shards, in ps-lite's three
// verbs: Push a partition's gradient sum, Pull current values, and Wait for a
// partition's update. Each shard is reached over PushPull lanes (push_pull_lane.h:
// the TCP data plane or the gRPC stream), carrying raw messages
// (common/partition_codec.h): a push goes out from the caller's buffer without a
// copy, and an update is kept as the slices it arrived in until WaitUpdated writes it
// into the caller's parameters (or lands there directly). Partitions complete
// independently. PsClient keeps the partitions' state, the expectations and the
// retries: a lane whose connection broke is replaced and its pushes sent again.
//
//   PsClient ps(identity, plan, shards, channel_options, v1::SYNC, v1::FLOAT32);
//   ps.Open();
//   ps.Push(step, p, node_grad.data() + plan.partitions(p).offset(), samples, 1);  // per p
//   ps.WaitUpdated(p, step, timeout, params.data() + plan.partitions(p).offset());
#ifndef TRIBUTARY_WORKER_COMM_PS_CLIENT_H_
#define TRIBUTARY_WORKER_COMM_PS_CLIENT_H_

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
#include "worker/comm/lane_keeper.h"
#include "worker/comm/ps_connection.h"
#include "worker/comm/push_pull_lane.h"
#include "worker/comm/shard_calls.h"

namespace tributary::worker {

// "auto", "local", "tcp", "grpc"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name);
const char* PsTransportName(PsTransport transport);

// How long InitPartitions and PullAll keep retrying a shard that answers UNAVAILABLE
// (not started yet, restarting), and how long a broken PushPull stream keeps
// reconnecting.
inline constexpr absl::Duration kDefaultPsRetryBudget = absl::Seconds(60);

// A DirectReceiver for its TCP lanes: they ask it where an awaited update may land.
class PsClient : public PsConnection, public DirectReceiver, private LaneKeeper::Owner {
 public:
  // plan: the job's partition plan; shards: the Assignment's shard map (index order).
  // streams_per_shard: PushPull streams to each shard, each on its own connection,
  // its partitions dealt among them in turn (at least 1). shared_memory: a lane on a
  // shard's local socket moves the bytes through a region shared with the shard
  // (TcpLane; the worker's --ps_shared_memory). node_region (with shared_memory): the
  // region every local lane hands its shard instead of one of slots of its own (the
  // session's parameters and gradients: TrainingSession), so that a push from it and
  // an update expected into it move without a copy on this side.
  PsClient(PsIdentity identity, v1::PartitionPlan plan, std::vector<v1::ShardInfo> shards,
           ChannelOptions channel_options, v1::TrainingMode mode, v1::DType wire_dtype,
           absl::Duration retry_budget = kDefaultPsRetryBudget, int streams_per_shard = 1,
           PsTransport transport = PsTransport::kAuto, bool shared_memory = true,
           std::shared_ptr<SharedRegion> node_region = nullptr);
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
  // Called by the lane reader that landed an expected update (Landed), outside mu_.
  void SetLandedListener(LandedFn listener) override { landed_listener_ = std::move(listener); }

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
  int reconnects() const { return lanes_->reconnects(); }
  // Lanes connected now over the TCP data plane.
  int tcp_lanes() const { return lanes_->tcp_lanes(); }
  int local_lanes() const { return lanes_->local_lanes(); }
  int shared_lanes() const { return lanes_->shared_lanes(); }
  // Updates received straight into an ExpectUpdateInto destination.
  uint64_t direct_updates() const { return direct_updates_; }
  // Of those, the updates the shard wrote there itself (node_region): not copied here.
  uint64_t in_place_updates() const { return in_place_updates_; }
  // InitPartitions/PullAll attempts repeated after UNAVAILABLE, since construction.
  int rpc_retries() const { return rpc_retries_; }

  // `auto`: a stream that fell back to gRPC because the shard's data port failed it
  // (not because the shard runs none) tries the data plane again after this long,
  // doubling after each failed try up to kMaxDataPlaneRetry, and moves back to it
  // once it answers. Call before Open.
  void set_data_plane_retry(absl::Duration first) { lanes_->set_first_data_plane_retry(first); }
  static constexpr absl::Duration kDefaultDataPlaneRetry = absl::Seconds(10);
  static constexpr absl::Duration kMaxDataPlaneRetry = absl::Minutes(10);
  const v1::PartitionPlan& plan() const { return plan_; }

  // DirectReceiver: the awaited update of an expected partition, straight into place.
  // An update that landed counts even when the expectations were dropped meanwhile
  // (an interrupt while it was being received).
  float* Claim(PushPullLane& lane, const PartitionValuesView& head,
               uint64_t data_bytes) override;
  void Landed(const PartitionValuesView& head, uint64_t data_bytes, const absl::Status& read,
              bool in_place) override;

 private:
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
    // a lane is receiving into it now, and whether it did (values.data is then empty:
    // the update lies in expect_dst).
    float* expect_dst = nullptr;
    uint64_t expect_step = 0;
    bool receiving_direct = false;
    PushPullLane* receiving_lane = nullptr;  // Where it is being received from.
    float* receiving_into = nullptr;         // The destination Claim handed out.
    bool received_direct = false;
    float* received_at = nullptr;  // Where it was received.
  };

  // LaneKeeper::Owner: the lanes' updates into the partitions' state.
  void OnUpdate(const std::string& lane, absl::Status decoded, ReceivedMessage& received,
                PartitionValuesView& values) override;
  void Reconnected(const std::vector<uint32_t>& partitions) override;
  void Failed(absl::Status status) override;

  // Runs `attempt` until it returns anything but UNAVAILABLE or the retry budget
  // (counted from the first attempt) runs out. The attempt's errors name the shard.
  absl::Status WithRetries(const std::function<absl::Status()>& attempt);
  // Where the update answering `push` is expected (ExpectUpdateInto for its step), if
  // anywhere.
  AnswerInto AnswerPlaceLocked(uint32_t partition, const Outgoing& push) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes one push on its partition's lane.
  void WritePush(uint32_t partition, const Outgoing& push, AnswerInto answer);
  // Landed's bookkeeping: whether the update now lies at its destination.
  bool LandedLocked(const PartitionValuesView& head, uint64_t data_bytes,
                    const absl::Status& read) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every expectation, after any receive into one has ended.
  void DropExpectationsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets failure_ unless it is set already.
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardRef RefOf(const LaneKeeper::ShardLink& shard) const;

  const PsIdentity identity_;
  const v1::PartitionPlan plan_;
  const ChannelOptions channel_options_;
  const v1::TrainingMode mode_;
  const v1::DType wire_dtype_;
  const absl::Duration retry_budget_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  std::vector<LaneKeeper::ShardLink> shards_;  // The shard map, in order.
  // Pushes narrowed to a FLOAT16/BFLOAT16 wire dtype, one region per partition (at
  // the partition's offset, in wire bytes), sent from here.
  std::vector<char> narrowed_;
  std::unique_ptr<LaneKeeper> lanes_;
  LandedFn landed_listener_;  // Set before Open, then only read.

  absl::Mutex mu_;
  std::vector<PartitionState> partitions_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // Sticky: a refused push or a closed client.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_pulled_{0};
  std::atomic<int> rpc_retries_{0};
  std::atomic<uint64_t> direct_updates_{0};
  std::atomic<uint64_t> in_place_updates_{0};
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_PS_CLIENT_H_
