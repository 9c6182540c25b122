// A replica on one CUDA device (--config=cuda builds only): parameters, gradients
// and activations in device memory, matrix products through cuBLAS (FP32, no
// TF32), the rest in gpu_kernels.cu. Every CUDA and cuBLAS return code is checked and
// turned into an absl::Status carrying the library's own error string.
#ifndef TRIBUTARY_WORKER_ENGINE_GPU_REPLICA_H_
#define TRIBUTARY_WORKER_ENGINE_GPU_REPLICA_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

// CUDA devices visible; 0 with `why` set when there are none or the driver is missing.
int GpuDeviceCount(std::string* why);

class GpuReplica : public Replica {
 public:
  // Allocates the device buffers on `device` and uploads host_parameters
  // (model.num_parameters floats).
  static absl::StatusOr<std::unique_ptr<GpuReplica>> Create(const ModelDef& model, int device,
                                                            const float* host_parameters);
  ~GpuReplica() override;

  const ModelDef& model() const override { return model_; }
  std::string device() const override;
  absl::Status SetParameters(const float* host, int64_t offset, int64_t length) override;
  absl::StatusOr<LossStats> ForwardBackward(const Batch& batch, const DropoutKey& key,
                                            const GradientReadyFn& on_ready) override;
  absl::StatusOr<LossStats> Evaluate(const Batch& batch) override;
  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override;
  double TakeCopySeconds() override;

  // For the worker's NCCL reduction: device buffers and the stream that orders them.
  float* device_gradients() { return gradients_; }
  float* device_parameters() { return parameters_; }
  cudaStream_t stream() const { return stream_; }
  int device_ordinal() const { return device_; }

 private:
  explicit GpuReplica(const ModelDef& model, int device);
  absl::Status Init(const float* host_parameters);
  absl::Status Reserve(int64_t n);
  absl::Status Upload(const Batch& batch);
  absl::StatusOr<LossStats> RunForward(const Batch& batch, const DropoutKey* dropout);
  absl::Status RunBackward(const Batch& batch, const DropoutKey* dropout,
                           const GradientReadyFn& on_ready);
  absl::StatusOr<LossStats> CollectLoss(int64_t n);

  // cudaMemcpyAsync on the stream, then synchronizes it; adds the copy's own time (CUDA
  // events around it, not the work queued before it) to copy_nanos_.
  absl::Status TimedCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);

  ModelDef model_;
  int device_;
  std::atomic<int64_t> copy_nanos_{0};  // SetParameters and CopyGradients, not yet taken.
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  float* parameters_ = nullptr;
  float* gradients_ = nullptr;
  // Device buffers sized for `capacity_` samples.
  int64_t capacity_ = -1;
  std::vector<float*> activations_;    // Per layer input, plus the logits.
  std::vector<float*> dropout_scale_;  // Per dropout layer.
  std::vector<int32_t*> pool_argmax_;  // Per max-pool layer.
  std::vector<float*> columns_;        // Per conv layer: im2col of the batch.
  float* grad_a_ = nullptr;
  float* grad_b_ = nullptr;
  float* dcol_ = nullptr;             // Largest conv's column gradient.
  float* weight_partials_ = nullptr;  // Largest conv's per-sample weight gradients.
  float* ones_ = nullptr;
  float* loss_ = nullptr;
  int32_t* correct_ = nullptr;
  int32_t* labels_ = nullptr;
  uint64_t* sample_ids_ = nullptr;
  std::vector<void*> allocations_;
  std::vector<float> host_loss_;
  std::vector<int32_t> host_correct_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_GPU_REPLICA_H_
