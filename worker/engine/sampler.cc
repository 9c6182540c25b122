#include "worker/engine/sampler.h"

#include <numeric>
#include <utility>

#include "common/batch_split.h"
#include "common/job_spec.h"
#include "worker/engine/counter_rng.h"

namespace tributary::engine {

Sampler::Sampler(const v1::JobSpec& spec, uint64_t train_samples)
    : spec_(spec),
      train_samples_(train_samples),
      steps_per_epoch_(std::max<uint64_t>(1, StepsPerEpoch(spec, train_samples))) {}

uint64_t Sampler::BatchSize(uint64_t step) const {
  return BatchSizeOfStep(spec_, train_samples_, step);
}

const std::vector<uint64_t>& Sampler::Permutation(uint64_t epoch) {
  if (epoch == cached_epoch_) return permutation_;
  permutation_.resize(train_samples_);
  std::iota(permutation_.begin(), permutation_.end(), uint64_t{0});
  CounterRng rng(spec_.seed(), kShuffleStream, epoch);
  for (uint64_t i = train_samples_; i > 1; --i) {
    std::swap(permutation_[i - 1], permutation_[rng.NextBelow(i)]);
  }
  cached_epoch_ = epoch;
  return permutation_;
}

std::vector<uint64_t> Sampler::GlobalBatch(uint64_t step) { return ReplicaSamples(step, 1, 0, 1); }

std::vector<uint64_t> Sampler::ReplicaSamples(uint64_t step, uint32_t total_replicas,
                                              uint32_t first_replica, uint32_t count) {
  const uint64_t batch = BatchSize(step);
  const uint64_t start = (step % steps_per_epoch_) * spec_.global_batch_size();
  const SampleRange part = PartsRange(batch, total_replicas, first_replica, count);
  const std::vector<uint64_t>& perm = Permutation(EpochOf(step));
  return std::vector<uint64_t>(perm.begin() + start + part.offset,
                               perm.begin() + start + part.offset + part.count);
}

}  // namespace tributary::engine
