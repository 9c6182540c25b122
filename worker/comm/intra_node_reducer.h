// Intra-node reduction: the gradients of every replica of a node group are summed
// onto the node leader, and the leader's new parameters are made current on every
// replica. One interface, three implementations:
//   "threads": the replicas of this process only (parallel sum of host buffers);
//   "gloo":    several CPU worker processes of one node (Gloo reduce/broadcast over
//              TCP, rendezvous through the coordinator's KV);
//   "nccl":    several GPU worker processes of one node (NCCL, unique id through
//              the coordinator's KV; --config=cuda only).
// Collective calls must be made in the same order with the same ranges by every
// process of the group; the worker issues them partition by partition.
#ifndef TRIBUTARY_WORKER_COMM_INTRA_NODE_REDUCER_H_
#define TRIBUTARY_WORKER_COMM_INTRA_NODE_REDUCER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/rendezvous_client.h"
#include "worker/engine/replica_group.h"

namespace tributary::worker {

class IntraNodeReducer {
 public:
  virtual ~IntraNodeReducer() = default;

  // Sums gradient elements [offset, offset + length) over every replica of the node
  // group into out[0, length) on the node leader (local rank 0); on the other workers
  // `out` is scratch. The replicas' gradients for the range must be final.
  virtual absl::Status ReduceGradients(int64_t offset, int64_t length, float* out) = 0;

  // Forms the node's gradient sum of [offset, offset + length) where no copy into the
  // caller's buffer is needed, and returns where element `offset` lies: one replica in
  // a node of one process, whose Replica::StageGradients memory holds it (a CPU
  // replica's own gradient buffer; a GPU replica's pinned staging, downloaded into).
  // Null: ReduceGradients must copy. The values stay until the replicas' next backward
  // pass; ReduceGradients would only have copied them.
  virtual absl::StatusOr<const float*> ReduceInPlace(int64_t offset, int64_t length) {
    return nullptr;
  }
  // Optional, before ReduceInPlace of the same range in the same pass, once the range
  // is final on every replica: starts bringing it to where ReduceInPlace will find it
  // (Replica::PrefetchGradients: a GPU replica's download), without waiting. A hint;
  // nothing by default.
  virtual absl::Status PrefetchInPlace(int64_t offset, int64_t length) { return absl::OkStatus(); }

  // Makes params[offset, offset + length) of the leader's host buffer current on every
  // replica of the group (`params` is this process's host parameter buffer; on the
  // other workers it receives the leader's values first). It may run while the
  // replicas' threads compute a forward pass that has not yet asked for this range
  // (Replica::set_parameters_needed): it touches only the range, never through
  // ReplicaGroup::RunOnAll.
  virtual absl::Status BroadcastParameters(float* params, int64_t offset, int64_t length) = 0;

  // "threads", "gloo" or "nccl".
  virtual std::string name() const = 0;
};

// The replicas of this process only. `replicas` must outlive the reducer.
std::unique_ptr<IntraNodeReducer> MakeThreadReducer(engine::ReplicaGroup& replicas);

struct GroupOptions {
  int local_rank = 0;
  int local_world_size = 1;
  // Address Gloo's TCP transport binds for its peers on this node.
  std::string bind_host = "127.0.0.1";
  // A peer that does not answer within this time makes the call fail.
  absl::Duration timeout = absl::Seconds(60);
};

// Several CPU worker processes of one node: threads inside the process, Gloo between
// processes. Builds the Gloo context through `rendezvous` (keys under "gloo/"); fails
// with the peer and the timeout named when the group does not assemble.
absl::StatusOr<std::unique_ptr<IntraNodeReducer>> MakeGlooReducer(engine::ReplicaGroup& replicas,
                                                                  RendezvousClient& rendezvous,
                                                                  const GroupOptions& options);

// The NCCL clique of a node group: one NCCL rank per GPU replica of every worker of
// the node, ranks in the order of the Assignment's replica indices.
struct NcclGroupOptions {
  int first_rank = 0;  // Assignment.first_replica - Assignment.node_first_replica.
  int world_size = 1;  // Assignment.node_replicas.
  absl::Duration timeout = absl::Seconds(60);
};

// Several GPU replicas of one node, in this process and in the node's other worker
// processes: NCCL reduce onto rank 0 (the node leader's first replica) and broadcast
// from it, on the replicas' own streams. NCCL rank 0 publishes its ncclUniqueId under
// "nccl/unique_id" in `rendezvous`; the others wait for it. A peer that stops answering
// aborts the communicator after `timeout` and the call fails. UNAVAILABLE in a build
// without --config=cuda, or when a replica is not a GPU replica.
absl::StatusOr<std::unique_ptr<IntraNodeReducer>> MakeNcclReducer(engine::ReplicaGroup& replicas,
                                                                  RendezvousClient& rendezvous,
                                                                  const NcclGroupOptions& options);

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_INTRA_NODE_REDUCER_H_
