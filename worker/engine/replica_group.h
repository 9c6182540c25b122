// R replicas in one process, each driven by its own thread: splits a node's samples
// across them along dim 0 (common/batch_split.h), runs them concurrently and sums
// their gradients in replica order. The single-process trainer uses it; the worker
// can use it as is or drive the replicas itself through RunOnAll.
#ifndef TRIBUTARY_WORKER_ENGINE_REPLICA_GROUP_H_
#define TRIBUTARY_WORKER_ENGINE_REPLICA_GROUP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/lane_pool.h"
#include "worker/engine/dataset.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

class ReplicaGroup {
 public:
  // All replicas must run the same model. Starts size() - 1 threads.
  explicit ReplicaGroup(std::vector<std::unique_ptr<Replica>> replicas);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  int size() const { return static_cast<int>(replicas_.size()); }
  Replica& replica(int i) { return *replicas_[i]; }
  const ModelDef& model() const { return replicas_[0]->model(); }

  // Runs fn(i) for every replica i concurrently (replica 0 on the calling thread,
  // replica i always on the same thread) and returns the first error, if any.
  absl::Status RunOnAll(const std::function<absl::Status(int)>& fn);

  // Forward/backward of `samples` (dataset indices) split over the replicas: replica
  // i gets PartsRange(samples.size(), size(), i, 1). grad_sum (num_parameters floats)
  // receives the sum of the replicas' gradients; returns the summed loss statistics.
  absl::StatusOr<LossStats> ComputeGradientSum(const Dataset& data,
                                               const std::vector<uint64_t>& samples,
                                               const DropoutKey& key, float* grad_sum);

  // Loss and accuracy over the dataset's first `max_samples` samples (0: all of them),
  // in chunks of batch_size samples, each chunk split over the replicas. Replicas must
  // hold the parameters to evaluate.
  absl::StatusOr<LossStats> Evaluate(const Dataset& data, int64_t batch_size,
                                     uint64_t max_samples = 0);

  // Calls SetParameters(host, 0, num_parameters) on every replica.
  absl::Status SetParameters(const float* host);

 private:
  // Gathers replica i's part of `samples` into its scratch and returns it as a Batch.
  Batch GatherPart(int i, const Dataset& data, const uint64_t* samples, int64_t count);

  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<BatchBuffer> scratch_;
  std::vector<LossStats> part_stats_;

  std::vector<absl::Status> results_;
  LanePool lanes_;  // Replicas 1..n-1, one lane each.
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_REPLICA_GROUP_H_
