// The optimizers and learning-rate schedules of a job, on plain float ranges.
// The PS shards apply them to one partition at a time and the single-process
// trainer to the whole flat buffer; both run this code, so SYNC training and the
// single-replica reference agree bit for bit given the same mean gradient.
#ifndef TRIBUTARY_COMMON_OPTIMIZER_H_
#define TRIBUTARY_COMMON_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/optimizer_step.h"
#include "proto/job.pb.h"

namespace tributary {

class Optimizer {
 public:
  // spec must have its defaults filled in (WithDefaults in common/job_spec.h).
  // INVALID_ARGUMENT naming the field for a bad value. total_steps is used by COSINE.
  static absl::StatusOr<Optimizer> Create(const v1::OptimizerSpec& spec, uint64_t total_steps);

  // Floats of state per parameter element: 0 (SGD), 1 (MOMENTUM), 2 (ADAM, ADAMW).
  int state_slots() const { return state_slots_; }

  // Learning rate of update number `step` (0-based), schedule and warm-up applied.
  float LearningRate(uint64_t step) const;

  // Everything update number `step` applies to each element (optimizer_step.h): what
  // Apply and ApplyMean use, and what a device kernel takes to do the same.
  UpdateCoefficients Coefficients(uint64_t step) const;

  // One update of params[0, n) with the mean gradient grad[0, n), as update number
  // `step` (0-based; Adam's bias correction uses step + 1). state holds
  // state_slots() * n floats laid out slot by slot (all of slot 0, then slot 1), zero
  // before the first update. Elementwise: applying it to sub-ranges (partitions) gives
  // exactly the same result as applying it to the whole buffer.
  void Apply(uint64_t step, float* params, const float* grad, float* state, size_t n) const;

  // The PS's fused pass: out[0, n) = in[0, n) after one update with the mean gradient
  // grad_sum[i] / divisor, reading and writing each element once. Bit for bit what
  // dividing first and calling Apply on a copy of `in` gives. `out` may be `in`.
  // `state_from` (not null): the state before the update is read from there and the
  // new one written to `state` (the same layout; the same bits as updating a copy in
  // place), so a caller that keeps the previous state needs no copy of it.
  void ApplyMean(uint64_t step, const float* in, float* out, const float* grad_sum, float divisor,
                 float* state, size_t n, const float* state_from = nullptr) const;

  // ApplyMean whose gradient sum is grad_sum[i] + last[i], with `last` the step's final
  // push (n FLOAT32 values, little-endian, any alignment) and grad_sum the sum of the
  // pushes before it (null: `last` is the only one), so that the last push is never
  // written into the sum: bit for bit adding it into grad_sum first and calling
  // ApplyMean. Returns false when an element of `last` or of the sum is not finite;
  // `out` and `state` then hold a partial update the caller must discard.
  bool ApplyMeanAdding(uint64_t step, const float* in, float* out, const float* grad_sum,
                       const char* last, float divisor, float* state, size_t n,
                       const float* state_from = nullptr) const;

  const v1::OptimizerSpec& spec() const { return spec_; }

 private:
  Optimizer(v1::OptimizerSpec spec, uint64_t total_steps);

  v1::OptimizerSpec spec_;
  uint64_t total_steps_;
  int state_slots_;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_OPTIMIZER_H_
