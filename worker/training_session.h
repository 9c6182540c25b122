// One generation of training inside a worker process: its replicas, its node
// group's reducer, and (on the node leader) its PS client. A step runs the data path
// of docs/worker.md: replicas compute forward/backward on their slice of the global batch;
// as backward finishes each partition (last layer first) a communication thread
// reduces it over the node group and the leader pushes it to its shard. The step
// returns once everything is pushed; the same thread then applies the PS's update
// partition by partition, last partition first, the order they were pushed (leader:
// wait for it and write it into the parameter buffer; all: broadcast it over the node
// group), while the next step's forward runs and waits, piece by piece, only for the
// partitions it reads.
// LOCAL_SGD: the leader applies the job's optimizer to the node's own parameters at
// every step instead (the update is the node's mean gradient), and pushes only at the
// end of each round: its parameter change since the round began. On a node of one
// process and one replica, a step inside a round takes that inner step on RunStep's
// own thread (nothing to reduce or push: InnerStepHere).
#ifndef TRIBUTARY_WORKER_TRAINING_SESSION_H_
#define TRIBUTARY_WORKER_TRAINING_SESSION_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/channel.h"
#include "common/shared_region.h"
#include "common/optimizer.h"
#include "proto/coordinator.pb.h"
#include "worker/comm/intra_node_reducer.h"
#include "worker/comm/ps_client.h"
#include "worker/comm/ps_connection.h"
#include "worker/comm/rendezvous_client.h"
#include "worker/coordinator_link.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model.h"
#include "worker/engine/replica_factory.h"
#include "worker/engine/replica_group.h"
#include "worker/engine/sampler.h"
#include "worker/update_gate.h"

namespace tributary::worker {

struct SessionOptions {
  CoordinatorLink* coordinator = nullptr;      // For the rendezvous KV. Not owned.
  ChannelOptions ps_channel;                   // For the PS shards.
  std::string bind_host = "127.0.0.1";         // Gloo's TCP transport.
  absl::Duration collective_timeout = absl::Seconds(30);
  // How long a step may wait for one partition's update before it fails.
  absl::Duration update_timeout = absl::Seconds(120);
  int64_t eval_batch_size = 1000;
  // The node leader's connection to the PS shards; unset: a PsClient over the
  // assignment's shard map (tests pass an in-memory one).
  std::function<std::unique_ptr<PsConnection>(const PsIdentity& identity,
                                              const v1::PartitionPlan& plan)>
      ps_connection;
  // Apply a step's update while the next step's forward runs (true), or finish it
  // before RunStep returns (false: the plain blocking path, for comparison).
  bool overlap_updates = true;
  // PushPull streams (each on its own connection) to each shard (PsClient).
  int ps_streams_per_shard = 1;
  // The TCP data plane or gRPC (PsClient).
  PsTransport ps_transport = PsTransport::kAuto;
  // Shared memory on the shards' local sockets (PsClient).
  bool ps_shared_memory = true;
  // Called on a replica's thread when the forward pass of `step` is about to wait for
  // parameters [offset, offset + length) that the previous step's update has not
  // applied yet (tracing; the tests watch the overlap through it). May be empty.
  std::function<void(uint64_t step, int64_t offset, int64_t length)> on_parameters_wait;
  // Makes the replica of one assigned device; unset: engine::CreateReplica (tests
  // pass replicas of their own, e.g. one that keeps its parameters apart like a GPU).
  std::function<absl::StatusOr<std::unique_ptr<engine::Replica>>(
      const engine::ModelDef& model, const v1::Device& device, float* host_parameters)>
      make_replica;
  // The job's TorchScript file (fetched and checked) when its model is torchscript.
  std::shared_ptr<const std::string> torchscript_bytes;
  // JobSpec.init_from's parameters, read by the runtime: they replace the seed's (the
  // node leader installs them on the PS). Their count must be the model's.
  std::shared_ptr<const std::vector<float>> initial_parameters;
};

// What one step did, from this worker's point of view.
struct StepStats {
  uint64_t step = 0;
  engine::LossStats loss;               // Over this worker's replicas.
  double compute_seconds = 0;           // Forward + backward of the replicas.
  std::vector<double> replica_seconds;  // Forward + backward of each replica.
  // The slowest replica's forward pass (start to its first gradient: the loss and the
  // last layer's first gradient included, its waits for parameters not) and backward
  // pass (its first gradient to its end). A GPU replica reports a gradient when its
  // work is queued, so there the split is the host's: most device time counts as backward.
  double forward_seconds = 0;
  double backward_seconds = 0;
  // Host <-> device copies of parameters and gradients (GPU replicas, the copies' own
  // device time summed over the process's replicas, whichever step they served); 0 on CPU.
  double copy_seconds = 0;
  // Leader: time the communication thread spent handing this step's partitions to
  // the PS connection (Push: encoding, and writing where the lane blocks).
  double push_seconds = 0;
  double reduce_seconds = 0;            // Intra-node reduction (overlapped with backward).
  // Leader: time the communication thread waited for the PS's updates of the
  // previous step (overlapped with this step's forward).
  double push_wait_seconds = 0;
  // Longest time a replica's forward pass stood waiting for the previous step's
  // updated partitions: the part of the update the overlap did not hide.
  double parameters_wait_seconds = 0;
  double step_seconds = 0;
};

class TrainingSession {
 public:
  // Builds the model, the replicas on the assignment's devices, the partition plan,
  // the reducer (threads / Gloo / NCCL) and, on the node leader, the PS client.
  // `data` must outlive the session.
  static absl::StatusOr<std::unique_ptr<TrainingSession>> Create(const v1::Assignment& assignment,
                                                                 const engine::Datasets& data,
                                                                 const SessionOptions& options);
  ~TrainingSession();

  // Installs the job on the PS shards (leader, idempotent), pulls the current
  // parameters and broadcasts them over the node group. Returns the step training
  // resumes from, checked against the assignment's resume_step.
  absl::StatusOr<uint64_t> Prepare();

  // Runs step `step`: forward/backward, reduction and (leader) push of every
  // partition. When it returns OK the update of step - 1 is fully applied and the
  // update of `step` is being applied in the background (FinishUpdate waits for it).
  // An update that failed (update timeout, a refused push, an interruption, a peer
  // gone) fails the next RunStep or FinishUpdate, which needed it; nothing is pushed
  // after such a failure.
  absl::StatusOr<StepStats> RunStep(uint64_t step);

  // Waits until the update of the last step run is applied on every replica of this
  // process (and broadcast over the node group); returns its error, if any. For
  // evaluation, pauses and the end of training.
  absl::Status FinishUpdate();

  // Gives up the update being applied, and every later one, with ABORTED naming
  // `reason` (a new generation, a stop, shutdown): waits end now, not at a timeout.
  // Thread-safe; the session cannot train on afterwards.
  void Interrupt(const std::string& reason);

  // The job's learning rate at `step` (its optimizer's schedule and warm-up).
  float LearningRate(uint64_t step) const;

  // Loss and accuracy of the current parameters on the test split's first
  // `max_samples` samples (0: all), after FinishUpdate.
  absl::StatusOr<engine::LossStats> Evaluate(uint64_t max_samples = 0);

  uint64_t total_steps() const { return total_steps_; }
  uint64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  uint64_t EpochOf(uint64_t step) const { return sampler_.EpochOf(step); }
  const engine::ModelDef& model() const { return model_; }
  const v1::Assignment& assignment() const { return assignment_; }
  const v1::PartitionPlan& plan() const { return plan_; }
  // A copy of the host parameters; fully current only after FinishUpdate returned OK.
  std::vector<float> parameters() const { return {params_.begin(), params_.end()}; }
  // Whether the parameters and the replica's gradients live in the node's region,
  // shared with the local PS shards (PlaceInNodeRegion).
  bool in_node_region() const { return node_region_shared_; }
  std::string reduce_backend() const { return reducer_->name(); }
  uint64_t bytes_pushed() const { return ps_ ? ps_->bytes_pushed() : 0; }
  uint64_t bytes_pulled() const { return ps_ ? ps_->bytes_pulled() : 0; }
  std::vector<std::string> replica_devices() const;
  std::vector<uint64_t> replica_batch_sizes(uint64_t step);

 private:
  TrainingSession(v1::Assignment assignment, const engine::Datasets& data, SessionOptions options,
                  engine::ModelDef model, v1::PartitionPlan plan, uint64_t total_steps);
  // Create's parts: a replica per assigned device (CPU replicas share the host
  // parameters), and the node group's reducer (NCCL, Gloo or threads).
  absl::Status MakeReplicas();
  absl::Status MakeReducer();
  // Before MakeReplicas: on a node leader of one process with one replica (CPU or
  // GPU), in SYNC with FLOAT32 pushes and shared memory allowed to local shards
  // (--ps_shared_memory, --ps_transport auto or local), moves params_ into a region
  // (node_region_) that also holds the replica's gradient buffer (a GPU replica's
  // download staging); the PS client hands it to every shard on the local socket, so
  // pushes go out from where backward (or the download) wrote them and the shards
  // write updates straight into the parameters (which a GPU replica uploads from,
  // page-locked). Anywhere else, or when the region cannot be made, nothing changes.
  void PlaceInNodeRegion();
  // After MakeReplicas: the replica keeps its gradients (a GPU replica: stages its
  // downloads) in the region; false (and the region is not handed to the PS client)
  // when it cannot.
  bool GradientsIntoNodeRegion();

  bool leader() const { return assignment_.node_leader(); }
  // Gathers replica i's slice of the step's global batch into its scratch.
  engine::Batch GatherReplica(int i, const std::vector<uint64_t>& global);
  // The communication thread, the only one that issues the node group's collectives
  // during training (so every process issues them in the same order): for each step,
  // reduces (and, on the leader, pushes) partitions from last to first as backward
  // finishes them, then applies the step's update from first to last.
  void CommLoop();
  absl::Status ReduceAndPush(uint64_t step);
  // The node's gradient sum of the partition: where it already lies when `in_place`
  // and the reducer can say where (IntraNodeReducer::ReduceInPlace), else summed into
  // node_grad_ (ReduceGradients).
  absl::StatusOr<const float*> NodeGradient(const v1::Partition& partition, bool in_place);
  // What the step's update is over and whether it ends a round (update_), and the
  // round's samples so far.
  void BeginStepUpdate(uint64_t step);
  // LOCAL_SGD inside a round (a step that does not end it) on the leader of a node of
  // one process with one replica: nothing to reduce over other replicas or processes,
  // nothing to push, so RunStep's own thread takes the inner step once the pass is
  // done (InnerStep), instead of handing the gradients to the communication thread
  // and waiting for it at the step's end and at the next forward's gate.
  bool InnerStepHere(uint64_t step) const;
  // The inner step of InnerStepHere: every partition, from the replica's own gradient
  // where it keeps one on the host (else a copy into node_grad_, timed into
  // `reduce_seconds`), or on the replica (inner_on_replica_: with at most one optimizer
  // state slot per element, one call over all the parameter partitions).
  absl::Status InnerStep(uint64_t step, double* reduce_seconds);
  // RunStep's end for InnerStepHere: the previous update's wait and errors, the
  // compute split, then InnerStep.
  absl::StatusOr<StepStats> FinishInnerStep(uint64_t step, const absl::Status& computed,
                                            absl::Time start,
                                            const std::vector<absl::Time>& start_of_replica,
                                            StepStats& stats);
  // Applies the update of the step ReduceAndPush did last, partition by partition,
  // opening the gate as it goes.
  absl::Status ApplyUpdate();
  // Waits for partition p's update (leader) and broadcasts it over the node group.
  absl::Status ApplyPartition(const v1::Partition& partition, double* waited);
  // LOCAL_SGD, leader: the node's update of the partition by the inner optimizer with
  // the node's gradient `grad` (the partition's, from its first element), from the
  // parameters into `out` (which may be the parameters themselves).
  void InnerUpdate(const v1::Partition& partition, const float* grad, float* out);
  // The same on the replica (inner_on_replica_) for parameters [offset, offset +
  // length): its parameters, its gradient.
  absl::Status ReplicaInnerUpdate(int64_t offset, int64_t length);
  // LOCAL_SGD, leader, a round's end: the node's values of a parameter partition after
  // this step's inner update, into `local` (from the replica when it keeps them).
  absl::Status RoundEndValues(const v1::Partition& partition, const float* grad, float* local);
  // Where the gradients final on every replica begin: the slowest replica's final_from_.
  int64_t FinalFromLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Time spent in one Push, into push_seconds_.
  void CountPush(absl::Time start);
  // A step's times that the communication thread and the replicas kept (reduction
  // added to what `stats` holds, pushes, the update's wait, the forward's wait for
  // parameters, the forward/backward split), and the replicas' copy seconds.
  void TakeStepTimesLocked(const std::vector<absl::Time>& started, StepStats& stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeCopySeconds(StepStats& stats);
  // The step's forward and backward seconds, from the slowest replica's start
  // (`started`), first gradient and parameter waits.
  void SplitComputeLocked(const std::vector<absl::Time>& started, StepStats& stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replica i's parameters-needed hook: blocks until [offset, offset + length) holds
  // the parameters of the step being computed (or the update failed).
  void WaitForParameters(int replica, int64_t offset, int64_t length);
  // The PS connection's landed listener (gate_on_landing_): partition p's update after
  // the push for `step` lies in params_, so the gate may open for it now.
  void UpdateLanded(uint32_t partition, uint64_t step);

  const v1::Assignment assignment_;
  const engine::Datasets& data_;
  const SessionOptions options_;
  const engine::ModelDef model_;
  const v1::PartitionPlan plan_;
  const uint64_t total_steps_;
  engine::Sampler sampler_;

  // PlaceInNodeRegion: params_ and node_gradients_ lie in it (and the PS client's lanes
  // hold it too); destroyed after everything that points into it.
  std::shared_ptr<SharedRegion> node_region_;
  float* node_gradients_ = nullptr;
  bool node_region_shared_ = false;  // The replica's gradients are there too.
  std::vector<float> own_params_;  // params_'s memory unless it lies in node_region_.
  // This process's host parameters (replicas read them).
  absl::Span<float> params_;
  // Leader: the node's gradient sum (LOCAL_SGD: at a round's end, what it pushes);
  // others: scratch.
  std::vector<float> node_grad_;
  // params_ page-locked where a replica is on a GPU and the driver allows it, so that
  // updates go up without a staging copy; destroyed before params_.
  std::unique_ptr<engine::PinnedHostMemory> pinned_params_;

  // What the communication thread works out when it reduces a step, for the update
  // that follows (both on that thread).
  struct StepUpdate {
    uint64_t step = 0;
    // This node's share of the step's batch, in loss elements (samples times the
    // model's loss_elements_per_sample).
    uint64_t node_samples = 0;
    bool sync = true;           // Pushed to the PS (always, except inside LOCAL_SGD rounds).
    uint64_t push_step = 0;     // The step the push names (LOCAL_SGD: its round's first).
  };
  StepUpdate update_;
  // The job's optimizer (its schedule; LOCAL_SGD, leader: the inner optimizer) and, in
  // LOCAL_SGD on the leader, its state, the parameters at the last synchronization, the
  // node's values at a round's end (scratch), and the round.
  const bool local_sgd_;
  std::optional<Optimizer> optimizer_;
  std::vector<float> inner_state_;
  std::vector<float> anchor_;
  std::vector<float> local_;
  // LOCAL_SGD on a node of one process with one replica that applies the inner step
  // where it keeps its parameters (a GPU): the gradients and parameters stay there
  // inside a round; the node's values come to the host only at the round's end.
  bool inner_on_replica_ = false;
  uint64_t round_start_ = 0;
  uint64_t round_samples_ = 0;
  std::unique_ptr<engine::ReplicaGroup> replicas_;
  // Every replica is done with a partition's parameters once it reported its
  // gradients: its update may be received straight into params_.
  bool updates_into_parameters_ = false;
  // SYNC on a node leader of one process whose replicas all read params_ themselves
  // (CPU): an update received straight into params_ is current for every replica as
  // it lands, so the thread that received it opens the gate for its partition
  // (UpdateLanded) instead of handing it to the communication thread first.
  bool gate_on_landing_ = false;
  std::unique_ptr<RendezvousClient> rendezvous_;
  std::unique_ptr<IntraNodeReducer> reducer_;
  std::unique_ptr<PsConnection> ps_;

  std::vector<engine::BatchBuffer> scratch_;

  // The step pipeline, in stages: the replicas' forward/backward marks gradients
  // final (final_from_); the communication thread reduces and pushes them (comm_*),
  // then applies the step's update through the gate; the next forward waits at the
  // gate for the parameters it reads.
  absl::Mutex mu_;
  std::vector<int64_t> final_from_ ABSL_GUARDED_BY(mu_);  // Per replica: grads [x, end) final.
  uint64_t comm_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool comm_pending_ ABSL_GUARDED_BY(mu_) = false;  // A step for the comm thread to do.
  bool comm_done_ ABSL_GUARDED_BY(mu_) = false;
  bool comm_abort_ ABSL_GUARDED_BY(mu_) = false;  // The replicas failed: push nothing.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status comm_status_ ABSL_GUARDED_BY(mu_);
  double reduce_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double push_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  // Per replica: when its first gradient of the running step was reported.
  std::vector<absl::Time> first_gradient_ ABSL_GUARDED_BY(mu_);
  uint64_t running_step_ ABSL_GUARDED_BY(mu_) = 0;                    // The step RunStep computes.
  std::vector<double> parameters_wait_seconds_ ABSL_GUARDED_BY(mu_);  // Per replica.
  std::vector<int> waiting_threads_ ABSL_GUARDED_BY(mu_);             // Per replica, now.
  std::vector<absl::Time> waiting_since_ ABSL_GUARDED_BY(mu_);        // Per replica.
  // The update to apply next (at most one: step s's is applied before step s + 1's
  // gradients are reduced, both on the communication thread).
  uint64_t update_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool update_queued_ ABSL_GUARDED_BY(mu_) = false;  // For the comm thread to start.
  double update_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // Leader: waiting for the PS.
  // gate_on_landing_: per partition, the push step whose update landed last, plus one
  // (0: none yet).
  std::vector<uint64_t> landed_after_ ABSL_GUARDED_BY(mu_);
  UpdateGate gate_;
  std::thread comm_thread_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_TRAINING_SESSION_H_
