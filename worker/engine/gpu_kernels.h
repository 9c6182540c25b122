// The small CUDA kernels of the GPU replica (the matrix products go to cuBLAS).
// Host-callable launchers: each enqueues on `stream` and returns the launch's
// cudaError_t, which the caller checks. Layouts match the CPU executor:
// activations are sample-major [N, C, H, W]; conv columns are [N][C*K*K][OH*OW].
#ifndef TRIBUTARY_WORKER_ENGINE_GPU_KERNELS_H_
#define TRIBUTARY_WORKER_ENGINE_GPU_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/optimizer_step.h"

namespace tributary::engine::gpu {

// Geometry of a Conv2d or MaxPool2d layer.
struct Window {
  int64_t channels, height, width;  // Input of one sample.
  int64_t out_channels, out_height, out_width;
  int kernel, stride, padding;
};

// y[s, j] += bias[j] for s < n, j < features.
cudaError_t AddBiasRows(float* y, const float* bias, int64_t n, int64_t features,
                        cudaStream_t stream);
// y[s, c, p] += bias[c] for p < plane.
cudaError_t AddBiasChannels(float* y, const float* bias, int64_t n, int64_t channels, int64_t plane,
                            cudaStream_t stream);
// db[j] = sum_s dy[s, j] (fixed order: deterministic).
cudaError_t SumRows(const float* dy, int64_t n, int64_t features, float* db, cudaStream_t stream);
// db[c] = sum over s, p of dy[s, c, p] (fixed-shape tree: deterministic).
cudaError_t SumChannels(const float* dy, int64_t n, int64_t channels, int64_t plane, float* db,
                        cudaStream_t stream);

cudaError_t ReluForward(const float* x, float* y, int64_t count, cudaStream_t stream);
cudaError_t ReluBackward(const float* y, const float* dy, float* dx, int64_t count,
                         cudaStream_t stream);
cudaError_t TanhForward(const float* x, float* y, int64_t count, cudaStream_t stream);
cudaError_t TanhBackward(const float* y, const float* dy, float* dx, int64_t count,
                         cudaStream_t stream);

// scale[s, e] = DropoutKeeps(seed, step, sample_ids[s], layer, e, p) / (1 - p);
// y = x * scale. The mask is the CPU's bit for bit (counter_rng.h).
cudaError_t DropoutForward(const float* x, float* y, float* scale, const uint64_t* sample_ids,
                           int64_t n, int64_t features, uint64_t seed, uint64_t step,
                           uint32_t layer, float p, cudaStream_t stream);
// dx = dy * scale (elementwise; also used for the forward of nothing).
cudaError_t Multiply(const float* a, const float* b, float* out, int64_t count,
                     cudaStream_t stream);

cudaError_t MaxPoolForward(const float* x, float* y, int32_t* argmax, int64_t n, const Window& w,
                           cudaStream_t stream);
cudaError_t MaxPoolBackward(const float* dy, const int32_t* argmax, float* dx, int64_t n,
                            const Window& w, cudaStream_t stream);

cudaError_t Im2Col(const float* x, float* col, int64_t n, const Window& w, cudaStream_t stream);
// dx = the adjoint of Im2Col applied to dcol (each input gathers its contributions).
cudaError_t Col2Im(const float* dcol, float* dx, int64_t n, const Window& w, cudaStream_t stream);

// Per sample: loss[s] = logsumexp(z_s) - z_s[label], correct[s] = (argmax == label),
// dlogits = softmax - onehot.
cudaError_t SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t n,
                                int64_t classes, float* loss, int32_t* correct, float* dlogits,
                                cudaStream_t stream);

cudaError_t Fill(float* data, float value, int64_t count, cudaStream_t stream);

// LOCAL_SGD's inner step in one pass over the range, in place: params[i] updated with
// the mean gradient grad_sum[i] / divisor, state slot by slot (state[i], state[n + i]),
// element by element what Optimizer::ApplyMean computes on the host.
cudaError_t ApplyMean(const UpdateCoefficients& c, float* params, const float* grad_sum,
                      float divisor, float* state, int64_t n, cudaStream_t stream);

}  // namespace tributary::engine::gpu

#endif  // TRIBUTARY_WORKER_ENGINE_GPU_KERNELS_H_
