// Forward/backward of a ModelDef on the CPU through Eigen, templated on the scalar
// type: the replicas run it in float; the finite-difference tests run the very same
// code in double so they can check gradients tightly.
#ifndef TRIBUTARY_WORKER_ENGINE_CPU_EXECUTOR_H_
#define TRIBUTARY_WORKER_ENGINE_CPU_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/engine/aligned.h"
#include "worker/engine/model.h"
#include "worker/engine/parallel_runner.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

// Threads (the replica's own included) that the large matrix products of each CPU
// executor created afterwards may use; products under ~20 MFLOP run on the replica's
// thread alone. Default 1. A process running R replicas on C cores sets max(1, C / R).
void SetCpuMatmulThreads(int threads);
int CpuMatmulThreads();

template <typename Scalar>
class CpuExecutor {
 public:
  explicit CpuExecutor(ModelDef model);
  ~CpuExecutor();

  const ModelDef& model() const { return model_; }

  // Summed loss/gradient of the batch at `params`; grads (num_parameters) is
  // overwritten. dropout == nullptr runs without dropout. The batch must have passed
  // CheckBatch. on_ready and needed may be empty (replica.h says when they run).
  LossStats ForwardBackward(const Scalar* params, const Batch& batch, const DropoutKey* dropout,
                            Scalar* grads, const GradientReadyFn& on_ready,
                            const ParametersNeededFn& needed = {});

  // Forward only, no dropout.
  LossStats Forward(const Scalar* params, const Batch& batch);

 private:
  LossStats RunForward(const Scalar* params, const Batch& batch, const DropoutKey* dropout,
                       Scalar* dlogits, const ParametersNeededFn& needed);
  // A convolution layer's forward pass (y from x) and backward pass (its parameters'
  // gradients into grads, the input's into grad_in_ when needed), as matrix products
  // over chunks of samples.
  void ConvForward(const LayerSpec& l, const Scalar* params, const Scalar* x, Scalar* y,
                   int64_t n);
  void ConvBackward(const LayerSpec& l, const Scalar* params, const Scalar* x, Scalar* grads,
                    int64_t n, bool need_input_grad);

  ModelDef model_;
  // activations_[i] is the input of layer i; activations_.back() holds the logits.
  // Every buffer reduced over is 64-byte aligned (aligned.h: run-to-run exactness).
  std::vector<AlignedVector<Scalar>> activations_;
  std::vector<AlignedVector<Scalar>> dropout_scale_;  // Per layer: mask / (1 - p).
  std::vector<std::vector<int32_t>> pool_argmax_;   // Per layer: input index of each max.
  AlignedVector<Scalar> grad_out_, grad_in_;        // Ping-pong activation gradients.
  std::unique_ptr<ParallelRunner> runner_;          // Splits large products.
  AlignedVector<Scalar> col_, dcol_, dout_;         // im2col scratch of a chunk of samples.
  AlignedVector<Scalar> bias_sums_;                 // A layer's bias gradient, summed here.
};

extern template class CpuExecutor<float>;
extern template class CpuExecutor<double>;

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_CPU_EXECUTOR_H_
