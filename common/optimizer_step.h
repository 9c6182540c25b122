// One optimizer update of one parameter element, for the host and for CUDA kernels:
// Optimizer (optimizer.h) runs these in its loops on the CPU (the PS shards, the
// single-process trainer, the node's LOCAL_SGD inner step), and the GPU replica's
// fused LOCAL_SGD kernel (gpu_kernels.cu) runs the very same functions over the flat
// buffer on the device, so both do the same arithmetic from the same coefficients.
// Header-only and free of library calls but sqrtf, so nvcc compiles it as device code.
#ifndef TRIBUTARY_COMMON_OPTIMIZER_STEP_H_
#define TRIBUTARY_COMMON_OPTIMIZER_STEP_H_

#include <cmath>

#if defined(__CUDACC__)
#define TRIBUTARY_OPTIMIZER_STEP __host__ __device__ __forceinline__
#else
#define TRIBUTARY_OPTIMIZER_STEP inline
#endif

namespace tributary {

// What one update of a job's optimizer needs, computed once per update on the host
// (Optimizer::Coefficients): the kind and its constants, the step's learning rate,
// Adam's bias corrections.
struct UpdateCoefficients {
  enum Kind : int { kSgd = 0, kMomentum = 1, kNesterov = 2, kAdam = 3, kAdamW = 4 };
  int kind = kSgd;
  float lr = 0;
  float weight_decay = 0;
  float momentum = 0;
  float beta1 = 0;
  float beta2 = 0;
  float epsilon = 0;
  float correction1 = 1;  // 1 - beta1^(step + 1)
  float correction2 = 1;  // 1 - beta2^(step + 1)
};

// Each returns the element's new value from its value p and gradient g, updating its
// state slots (velocity; Adam's m and v) in place.
TRIBUTARY_OPTIMIZER_STEP float SgdStep(const UpdateCoefficients& c, float p, float g) {
  return p - c.lr * (g + c.weight_decay * p);
}

TRIBUTARY_OPTIMIZER_STEP float MomentumStep(const UpdateCoefficients& c, float p, float g,
                                         float& velocity) {
  const float d = g + c.weight_decay * p;
  velocity = c.momentum * velocity + d;
  return p - c.lr * velocity;
}

TRIBUTARY_OPTIMIZER_STEP float NesterovStep(const UpdateCoefficients& c, float p, float g,
                                         float& velocity) {
  const float d = g + c.weight_decay * p;
  velocity = c.momentum * velocity + d;
  return p - c.lr * (d + c.momentum * velocity);
}

// kDecoupled: AdamW (the decay applied to the value, not added to the gradient).
template <bool kDecoupled>
TRIBUTARY_OPTIMIZER_STEP float AdamStep(const UpdateCoefficients& c, float p, float g, float& m,
                                     float& v) {
  if (kDecoupled) p -= c.lr * c.weight_decay * p;
  const float d = kDecoupled ? g : g + c.weight_decay * p;
  m = c.beta1 * m + (1 - c.beta1) * d;
  v = c.beta2 * v + (1 - c.beta2) * d * d;
  const float m_hat = m / c.correction1;
  const float v_hat = v / c.correction2;
  return p - c.lr * m_hat / (sqrtf(v_hat) + c.epsilon);
}

// The update of element i of a range of n: value p, gradient g, state laid out slot by
// slot (state[i], state[n + i]). The kind is the same for the whole range.
TRIBUTARY_OPTIMIZER_STEP float StepOf(const UpdateCoefficients& c, float p, float g, float* state,
                                   long long i, long long n) {
  switch (c.kind) {
    case UpdateCoefficients::kMomentum:
      return MomentumStep(c, p, g, state[i]);
    case UpdateCoefficients::kNesterov:
      return NesterovStep(c, p, g, state[i]);
    case UpdateCoefficients::kAdam:
      return AdamStep<false>(c, p, g, state[i], state[n + i]);
    case UpdateCoefficients::kAdamW:
      return AdamStep<true>(c, p, g, state[i], state[n + i]);
    default:
      return SgdStep(c, p, g);
  }
}

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_OPTIMIZER_STEP_H_
