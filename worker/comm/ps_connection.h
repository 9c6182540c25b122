// What a node leader's training session needs of the parameter server, in ps-lite's
// verbs: install the job, pull the current values, push a partition's gradient sum,
// wait for its update. PsClient (ps_client.h) speaks gRPC to the shards;
// services/parameter_server/testing/in_memory_ps.h calls ParameterShard objects
// directly, so that TrainingSession's tests need no server.
#ifndef TRIBUTARY_WORKER_COMM_PS_CONNECTION_H_
#define TRIBUTARY_WORKER_COMM_PS_CONNECTION_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

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

class PsConnection {
 public:
  virtual ~PsConnection() = default;

  // Installs the job on every shard (idempotent): the spec and the initial values
  // (params: the whole flat buffer). The lowest step the shards stand at.
  virtual absl::StatusOr<uint64_t> InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                                  const float* params) = 0;
  // Current values of every partition into params; the lowest step they are for.
  virtual absl::StatusOr<uint64_t> PullAll(float* params) = 0;
  // Starts receiving updates (they are kept until WaitUpdated asks for them).
  virtual absl::Status Open() = 0;
  // Partition p's gradient sum for `step` (LOCAL_SGD: its parameter change over the
  // round [step, step + steps) times the round's samples; steps is 1 otherwise).
  // `data` is sent from where it lies and must stay unchanged until WaitUpdated(p,
  // step) returned (it may be sent again).
  virtual absl::Status Push(uint64_t step, uint32_t partition, const float* data,
                            uint64_t sample_count, uint32_t steps) = 0;
  // Optional, before Push(step, p): the caller will pass dst to WaitUpdated(p, step)
  // and promises neither to read nor to write dst[0, length) until that returns; the
  // update may then be received straight into dst as it arrives, instead of being
  // kept and copied there by WaitUpdated. Ignored by default. Where dst lies in a
  // region shared with the shard (PsClient's node region) the shard writes the update
  // there itself, when the step completes: also after a WaitUpdated that failed or an
  // Interrupt (with that update's values), so after either the caller treats dst as
  // the shard's until it pulls again or drops the region.
  virtual void ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) {}

  // Called each time an update of an ExpectUpdateInto destination lies there whole:
  // partition p's update after our push for `step`, before WaitUpdated(p, step)
  // returns it. It runs on the thread that received the update (a lane's reader), with
  // none of the connection's locks held, so it may open the way for readers of dst at
  // once instead of waiting for the caller of WaitUpdated. Set before Open; a
  // connection that never receives into a destination never calls it.
  using LandedFn = std::function<void(uint32_t partition, uint64_t step)>;
  virtual void SetLandedListener(LandedFn listener) {}

  // Blocks until partition p's update after our push for `step` arrived, then writes
  // its values into dst[0, length) (the partition's place in the parameter buffer: it
  // is written here, on the caller's thread, never while the caller computes). OK
  // whenever it arrived, even after an Interrupt. FAILED_PRECONDITION: a shard refused
  // the push (a new generation); ABORTED after Interrupt while the update is still
  // missing; DEADLINE_EXCEEDED after `timeout`.
  virtual absl::Status WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                                   float* dst) = 0;
  // Fails every wait, now and later, with ABORTED naming `reason` (a new generation,
  // a stop, shutdown): the session is over.
  virtual void Interrupt(const std::string& reason) = 0;
  virtual void Close() = 0;

  virtual uint64_t bytes_pushed() const = 0;
  virtual uint64_t bytes_pulled() const = 0;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_PS_CONNECTION_H_
