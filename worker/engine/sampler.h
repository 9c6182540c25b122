// Which samples each step trains on. The global batch of step t is a fixed slice
// of a (seed, epoch) permutation of the training set, independent of how many
// nodes and replicas share it; replica r of R gets PartsRange(batch, R, r, 1) of it
// (common/batch_split.h, remainder to the first replicas). The worker and the
// single-process trainer both call this, so their batches agree sample for sample.
#ifndef TRIBUTARY_WORKER_ENGINE_SAMPLER_H_
#define TRIBUTARY_WORKER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "proto/job.pb.h"

namespace tributary::engine {

class Sampler {
 public:
  // spec: defaults applied (global_batch_size and seed are read); train_samples > 0.
  Sampler(const v1::JobSpec& spec, uint64_t train_samples);

  uint64_t train_samples() const { return train_samples_; }
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  // step is the 0-based global step of the job (it runs on across epochs).
  uint64_t EpochOf(uint64_t step) const { return step / steps_per_epoch_; }
  // Samples in the global batch of `step` (the epoch's last batch may be short).
  uint64_t BatchSize(uint64_t step) const;

  // Dataset indices of the global batch of `step`, in batch order.
  std::vector<uint64_t> GlobalBatch(uint64_t step);

  // The samples of replicas [first_replica, first_replica + count) when the global
  // batch of `step` is split over total_replicas replicas: one contiguous slice of
  // GlobalBatch(step). A node passes its first global replica index and its R.
  std::vector<uint64_t> ReplicaSamples(uint64_t step, uint32_t total_replicas,
                                       uint32_t first_replica, uint32_t count = 1);

  // The permutation of [0, train_samples) for `epoch`: Fisher-Yates driven by
  // (seed, epoch). Cached for the latest epoch asked for; not thread-safe.
  const std::vector<uint64_t>& Permutation(uint64_t epoch);

 private:
  v1::JobSpec spec_;
  uint64_t train_samples_;
  uint64_t steps_per_epoch_;
  uint64_t cached_epoch_ = ~uint64_t{0};
  std::vector<uint64_t> permutation_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_SAMPLER_H_
