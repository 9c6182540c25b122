#include "common/optimizer_step.h"
#include "worker/engine/counter_rng.h"
#include "worker/engine/gpu_kernels.h"

namespace tributary::engine::gpu {
namespace {

constexpr int kThreads = 256;

unsigned int Blocks(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 65535 * 64 ? (blocks > 0 ? blocks : 1) : 65535 * 64);
}

#define GRID_STRIDE(i, count)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (count); \
       i += int64_t{blockDim.x} * gridDim.x)

// One thread per element: the same StepOf the host loops' element functions are
// (optimizer_step.h), with the gradient divided as ApplyMean divides it.
__global__ void ApplyMeanKernel(UpdateCoefficients c, float* params, const float* grad_sum,
                                float divisor, float* state, int64_t n) {
  GRID_STRIDE(i, n) { params[i] = StepOf(c, params[i], grad_sum[i] / divisor, state, i, n); }
}

__global__ void AddBiasRowsKernel(float* y, const float* bias, int64_t n, int64_t features) {
  GRID_STRIDE(i, n * features) { y[i] += bias[i % features]; }
}

__global__ void AddBiasChannelsKernel(float* y, const float* bias, int64_t n, int64_t channels,
                                      int64_t plane) {
  GRID_STRIDE(i, n * channels * plane) { y[i] += bias[(i / plane) % channels]; }
}

__global__ void SumRowsKernel(const float* dy, int64_t n, int64_t features, float* db) {
  GRID_STRIDE(j, features) {
    float sum = 0;
    for (int64_t s = 0; s < n; ++s) sum += dy[s * features + j];
    db[j] = sum;
  }
}

// One block per channel; each thread sums a strided subset, then a fixed tree.
__global__ void SumChannelsKernel(const float* dy, int64_t n, int64_t channels, int64_t plane,
                                  float* db) {
  __shared__ float partial[kThreads];
  const int64_t c = blockIdx.x;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n * plane; i += blockDim.x) {
    const int64_t s = i / plane;
    const int64_t p = i % plane;
    sum += dy[(s * channels + c) * plane + p];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = partial[0];
}

__global__ void ReluForwardKernel(const float* x, float* y, int64_t count) {
  GRID_STRIDE(i, count) { y[i] = x[i] > 0 ? x[i] : 0.0f; }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, float* dx, int64_t count) {
  GRID_STRIDE(i, count) { dx[i] = y[i] > 0 ? dy[i] : 0.0f; }
}

__global__ void TanhForwardKernel(const float* x, float* y, int64_t count) {
  GRID_STRIDE(i, count) { y[i] = tanhf(x[i]); }
}

__global__ void TanhBackwardKernel(const float* y, const float* dy, float* dx, int64_t count) {
  GRID_STRIDE(i, count) { dx[i] = dy[i] * (1.0f - y[i] * y[i]); }
}

__global__ void DropoutForwardKernel(const float* x, float* y, float* scale,
                                     const uint64_t* sample_ids, int64_t n, int64_t features,
                                     uint64_t seed, uint64_t step, uint32_t layer, float p) {
  const float keep_scale = 1.0f / (1.0f - p);
  GRID_STRIDE(i, n * features) {
    const int64_t s = i / features;
    const int64_t e = i % features;
    const float m = DropoutKeeps(seed, step, sample_ids[s], layer, static_cast<uint64_t>(e), p)
                        ? keep_scale
                        : 0.0f;
    scale[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out, int64_t count) {
  GRID_STRIDE(i, count) { out[i] = a[i] * b[i]; }
}

__global__ void MaxPoolForwardKernel(const float* x, float* y, int32_t* argmax, int64_t n,
                                     Window w) {
  const int64_t out_size = w.channels * w.out_height * w.out_width;
  const int64_t in_size = w.channels * w.height * w.width;
  GRID_STRIDE(i, n * out_size) {
    const int64_t s = i / out_size;
    const int64_t r = i % out_size;
    const int64_t c = r / (w.out_height * w.out_width);
    const int64_t oh = (r / w.out_width) % w.out_height;
    const int64_t ow = r % w.out_width;
    const float* xs = x + s * in_size;
    int64_t best = (c * w.height + oh * w.kernel) * w.width + ow * w.kernel;
    for (int ki = 0; ki < w.kernel; ++ki) {
      for (int kj = 0; kj < w.kernel; ++kj) {
        const int64_t at = (c * w.height + oh * w.kernel + ki) * w.width + ow * w.kernel + kj;
        if (xs[at] > xs[best]) best = at;
      }
    }
    y[i] = xs[best];
    argmax[i] = static_cast<int32_t>(best);
  }
}

// Windows do not overlap (stride == kernel): each input feeds at most one output.
__global__ void MaxPoolBackwardKernel(const float* dy, const int32_t* argmax, float* dx, int64_t n,
                                      Window w) {
  const int64_t out_size = w.channels * w.out_height * w.out_width;
  const int64_t in_size = w.channels * w.height * w.width;
  GRID_STRIDE(i, n * in_size) {
    const int64_t s = i / in_size;
    const int64_t r = i % in_size;
    const int64_t c = r / (w.height * w.width);
    const int64_t ih = (r / w.width) % w.height;
    const int64_t iw = r % w.width;
    const int64_t oh = ih / w.kernel;
    const int64_t ow = iw / w.kernel;
    float g = 0;
    if (oh < w.out_height && ow < w.out_width) {
      const int64_t o = s * out_size + (c * w.out_height + oh) * w.out_width + ow;
      if (argmax[o] == r) g = dy[o];
    }
    dx[i] = g;
  }
}

__global__ void Im2ColKernel(const float* x, float* col, int64_t n, Window w) {
  const int64_t ohw = w.out_height * w.out_width;
  const int64_t ckk = w.channels * w.kernel * w.kernel;
  const int64_t in_size = w.channels * w.height * w.width;
  GRID_STRIDE(i, n * ckk * ohw) {
    const int64_t s = i / (ckk * ohw);
    const int64_t row = (i / ohw) % ckk;
    const int64_t p = i % ohw;
    const int64_t c = row / (w.kernel * w.kernel);
    const int64_t ki = (row / w.kernel) % w.kernel;
    const int64_t kj = row % w.kernel;
    const int64_t ih = (p / w.out_width) * w.stride - w.padding + ki;
    const int64_t iw = (p % w.out_width) * w.stride - w.padding + kj;
    const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
    col[i] = inside ? x[s * in_size + (c * w.height + ih) * w.width + iw] : 0.0f;
  }
}

__global__ void Col2ImKernel(const float* dcol, float* dx, int64_t n, Window w) {
  const int64_t ohw = w.out_height * w.out_width;
  const int64_t ckk = w.channels * w.kernel * w.kernel;
  const int64_t in_size = w.channels * w.height * w.width;
  GRID_STRIDE(i, n * in_size) {
    const int64_t s = i / in_size;
    const int64_t r = i % in_size;
    const int64_t c = r / (w.height * w.width);
    const int64_t ih = (r / w.width) % w.height;
    const int64_t iw = r % w.width;
    float sum = 0;
    for (int ki = 0; ki < w.kernel; ++ki) {
      const int64_t oh_scaled = ih + w.padding - ki;
      if (oh_scaled < 0 || oh_scaled % w.stride != 0) continue;
      const int64_t oh = oh_scaled / w.stride;
      if (oh >= w.out_height) continue;
      for (int kj = 0; kj < w.kernel; ++kj) {
        const int64_t ow_scaled = iw + w.padding - kj;
        if (ow_scaled < 0 || ow_scaled % w.stride != 0) continue;
        const int64_t ow = ow_scaled / w.stride;
        if (ow >= w.out_width) continue;
        const int64_t row = (c * w.kernel + ki) * w.kernel + kj;
        sum += dcol[(s * ckk + row) * ohw + oh * w.out_width + ow];
      }
    }
    dx[i] = sum;
  }
}

__global__ void SoftmaxCrossEntropyKernel(const float* logits, const int32_t* labels, int64_t n,
                                          int64_t classes, float* loss, int32_t* correct,
                                          float* dlogits) {
  GRID_STRIDE(s, n) {
    const float* z = logits + s * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    const int32_t label = labels[s];
    const float max = z[best];
    float total = 0;
    for (int64_t c = 0; c < classes; ++c) total += expf(z[c] - max);
    const float log_total = logf(total);
    loss[s] = log_total + max - z[label];
    correct[s] = best == label ? 1 : 0;
    float* d = dlogits + s * classes;
    for (int64_t c = 0; c < classes; ++c) d[c] = expf(z[c] - max - log_total);
    d[label] -= 1.0f;
  }
}

__global__ void FillKernel(float* data, float value, int64_t count) {
  GRID_STRIDE(i, count) { data[i] = value; }
}

}  // namespace

cudaError_t AddBiasRows(float* y, const float* bias, int64_t n, int64_t features,
                        cudaStream_t stream) {
  AddBiasRowsKernel<<<Blocks(n * features), kThreads, 0, stream>>>(y, bias, n, features);
  return cudaGetLastError();
}

cudaError_t AddBiasChannels(float* y, const float* bias, int64_t n, int64_t channels, int64_t plane,
                            cudaStream_t stream) {
  AddBiasChannelsKernel<<<Blocks(n * channels * plane), kThreads, 0, stream>>>(y, bias, n, channels,
                                                                               plane);
  return cudaGetLastError();
}

cudaError_t SumRows(const float* dy, int64_t n, int64_t features, float* db, cudaStream_t stream) {
  SumRowsKernel<<<Blocks(features), kThreads, 0, stream>>>(dy, n, features, db);
  return cudaGetLastError();
}

cudaError_t SumChannels(const float* dy, int64_t n, int64_t channels, int64_t plane, float* db,
                        cudaStream_t stream) {
  SumChannelsKernel<<<static_cast<unsigned int>(channels), kThreads, 0, stream>>>(dy, n, channels,
                                                                                  plane, db);
  return cudaGetLastError();
}

cudaError_t ReluForward(const float* x, float* y, int64_t count, cudaStream_t stream) {
  ReluForwardKernel<<<Blocks(count), kThreads, 0, stream>>>(x, y, count);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* y, const float* dy, float* dx, int64_t count,
                         cudaStream_t stream) {
  ReluBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(y, dy, dx, count);
  return cudaGetLastError();
}

cudaError_t TanhForward(const float* x, float* y, int64_t count, cudaStream_t stream) {
  TanhForwardKernel<<<Blocks(count), kThreads, 0, stream>>>(x, y, count);
  return cudaGetLastError();
}

cudaError_t TanhBackward(const float* y, const float* dy, float* dx, int64_t count,
                         cudaStream_t stream) {
  TanhBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(y, dy, dx, count);
  return cudaGetLastError();
}

cudaError_t DropoutForward(const float* x, float* y, float* scale, const uint64_t* sample_ids,
                           int64_t n, int64_t features, uint64_t seed, uint64_t step,
                           uint32_t layer, float p, cudaStream_t stream) {
  DropoutForwardKernel<<<Blocks(n * features), kThreads, 0, stream>>>(
      x, y, scale, sample_ids, n, features, seed, step, layer, p);
  return cudaGetLastError();
}

cudaError_t Multiply(const float* a, const float* b, float* out, int64_t count,
                     cudaStream_t stream) {
  MultiplyKernel<<<Blocks(count), kThreads, 0, stream>>>(a, b, out, count);
  return cudaGetLastError();
}

cudaError_t MaxPoolForward(const float* x, float* y, int32_t* argmax, int64_t n, const Window& w,
                           cudaStream_t stream) {
  MaxPoolForwardKernel<<<Blocks(n * w.channels * w.out_height * w.out_width), kThreads, 0,
                         stream>>>(x, y, argmax, n, w);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(const float* dy, const int32_t* argmax, float* dx, int64_t n,
                            const Window& w, cudaStream_t stream) {
  MaxPoolBackwardKernel<<<Blocks(n * w.channels * w.height * w.width), kThreads, 0, stream>>>(
      dy, argmax, dx, n, w);
  return cudaGetLastError();
}

cudaError_t Im2Col(const float* x, float* col, int64_t n, const Window& w, cudaStream_t stream) {
  const int64_t count = n * w.channels * w.kernel * w.kernel * w.out_height * w.out_width;
  Im2ColKernel<<<Blocks(count), kThreads, 0, stream>>>(x, col, n, w);
  return cudaGetLastError();
}

cudaError_t Col2Im(const float* dcol, float* dx, int64_t n, const Window& w, cudaStream_t stream) {
  Col2ImKernel<<<Blocks(n * w.channels * w.height * w.width), kThreads, 0, stream>>>(dcol, dx, n,
                                                                                     w);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t n,
                                int64_t classes, float* loss, int32_t* correct, float* dlogits,
                                cudaStream_t stream) {
  SoftmaxCrossEntropyKernel<<<Blocks(n), kThreads, 0, stream>>>(logits, labels, n, classes, loss,
                                                                correct, dlogits);
  return cudaGetLastError();
}

cudaError_t Fill(float* data, float value, int64_t count, cudaStream_t stream) {
  FillKernel<<<Blocks(count), kThreads, 0, stream>>>(data, value, count);
  return cudaGetLastError();
}

cudaError_t ApplyMean(const UpdateCoefficients& c, float* params, const float* grad_sum,
                      float divisor, float* state, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ApplyMeanKernel<<<Blocks(n), kThreads, 0, stream>>>(c, params, grad_sum, divisor, state, n);
  return cudaGetLastError();
}

}  // namespace tributary::engine::gpu
