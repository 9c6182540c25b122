// A replica on one CUDA device (--config=cuda builds only): parameters, gradients
// and activations in device memory, matrix products through cuBLAS (FP32, no
// TF32), the rest in gpu_kernels.cu. Every CUDA and cuBLAS return code is checked and
// turned into an absl::Status carrying the library's own error string.
//
// Copies between host and device run on a copy stream of their own, through pinned
// staging buffers, ordered by events instead of stream synchronizations (issue 25):
//  - backward records, per tensor, an event once the tensor's gradient is computed
//    and the pass reads its parameters no more (tensor_done_), then reports it ready;
//    CopyGradients makes the copy stream wait for the events of the range's tensors
//    only, so layer k's gradient goes down while the layers before it compute;
//    StageGradients does the same and leaves the range in the pinned staging, where
//    the worker pushes it from (no copy into the worker's buffer);
//    PrefetchGradients starts a range's download as soon as the pass reported it ready,
//    without waiting, so that the downloads of every partition a pass finished run back
//    to back while the worker pushes the ones already down; the range's StageGradients
//    in the same pass then waits for that download only (DownloadBook);
//  - SetParameters stages the range in pinned memory and enqueues its upload after
//    the same events (the pass's last reads of those parameters), without waiting; from
//    page-locked host memory (RegisterHostMemory: the worker's parameter buffer) it
//    uploads directly, without the staging copy, and without waiting either (the
//    caller leaves the range alone until a later download returned);
//    the forward makes the compute stream wait, layer by layer, for the latest upload
//    over the layer's range (CopyLedger), so layer k's parameters go up while the
//    layers before it compute.
#ifndef TRIBUTARY_WORKER_ENGINE_GPU_REPLICA_H_
#define TRIBUTARY_WORKER_ENGINE_GPU_REPLICA_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/engine/copy_ledger.h"
#include "worker/engine/download_book.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

// CUDA devices visible; 0 with `why` set when there are none or the driver is missing.
int GpuDeviceCount(std::string* why);

// Page-locks host memory [p, p + bytes) for every device (cudaHostRegister, portable):
// SetParameters uploads from such memory without staging it. The driver's error where
// it refuses. UnregisterHostMemory undoes it (before the memory is freed).
absl::Status RegisterHostMemory(void* p, size_t bytes);
void UnregisterHostMemory(void* p);

class GpuReplica : public Replica {
 public:
  // Allocates the device buffers on `device` and uploads host_parameters
  // (model.num_parameters floats).
  static absl::StatusOr<std::unique_ptr<GpuReplica>> Create(const ModelDef& model, int device,
                                                            const float* host_parameters);
  ~GpuReplica() override;

  const ModelDef& model() const override { return model_; }
  std::string device() const override;
  // A pass reads the device's parameters only: the host buffer may take an update at
  // any time (SetParameters orders the upload after the pass's last reads).
  bool DoneWithParametersWhenReady() const override { return true; }
  absl::Status SetParameters(const float* host, int64_t offset, int64_t length) override;
  absl::StatusOr<LossStats> ForwardBackward(const Batch& batch, const DropoutKey& key,
                                            const GradientReadyFn& on_ready) override;
  absl::StatusOr<LossStats> Evaluate(const Batch& batch) override;
  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override;
  // Into pinned_gradients_, which only gradient downloads write: the range stays there
  // until its next download, after the next pass's backward.
  absl::StatusOr<const float*> StageGradients(int64_t offset, int64_t length) override;
  // Into the same place as StageGradients, on the copy stream after the range's
  // tensors' events; at most kPrefetchSlots outstanding (beyond them StageGradients
  // downloads the range itself).
  absl::Status PrefetchGradients(int64_t offset, int64_t length) override;
  // StageGradients downloads into `buffer` (the worker's node region, shared with the
  // local PS shards, so a push goes out from where the download put it) instead of its
  // own staging, once the driver page-locked it (RegisterHostMemory; false, and the
  // replica keeps its staging, where it refuses). CopyGradients keeps its staging.
  bool UseGradientBuffer(float* buffer) override;
  double TakeCopySeconds() override;
  // LOCAL_SGD inside a round: gpu::ApplyMean on the compute stream, state on the device.
  bool AppliesInnerUpdate() const override { return true; }
  absl::Status InnerUpdate(const UpdateCoefficients& c, int slots, int64_t offset, int64_t length,
                           float divisor) override;
  absl::Status CopyParameters(int64_t offset, int64_t length, float* dst) override;

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
  // Upload, forward, and with a dropout key (training) backward, then the loss.
  absl::StatusOr<LossStats> Pass(const Batch& batch, const DropoutKey* key,
                                 const GradientReadyFn& on_ready);
  absl::Status RunBackward(const Batch& batch, const DropoutKey* dropout,
                           const GradientReadyFn& on_ready);
  absl::StatusOr<LossStats> CollectLoss(int64_t n);
  // After a failed pass: waits for the kernels it enqueued (they may still read the
  // parameters a later upload overwrites) and marks every tensor done.
  void SettleAfterError();

  // Makes `stream` wait until this pass computed the gradients of, and no longer
  // reads the parameters of, every tensor overlapping [offset, offset + length).
  absl::Status WaitForTensors(cudaStream_t stream, int64_t offset, int64_t length);
  // Copies device[offset, offset + length) to staging[offset, ...) (pinned), on the
  // copy stream after `after` (which enqueues the waits the copy needs), waits for it,
  // and copies it on to dst unless dst is null; adds its time to copy_nanos_.
  absl::Status Download(const char* what, const float* device, int64_t offset, int64_t length,
                        float* staging, float* dst, const std::function<absl::Status()>& after);
  // Download's halves, with copy_mu_ held: the copy on the copy stream between events
  // `begin` and `end` (the caller enqueued the waits it needs), and the wait for it,
  // its time added to copy_nanos_. PrefetchGradients and StageGradients use them apart.
  absl::Status EnqueueDownload(const float* device, int64_t offset, int64_t length, float* staging,
                               cudaEvent_t begin, cudaEvent_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);
  absl::Status FinishDownload(cudaEvent_t begin, cudaEvent_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);
  // Makes stream_ wait for the latest upload over [offset, offset + length).
  absl::Status WaitForUploads(int64_t offset, int64_t length);
  // Records on stream_ that tensor `range` is done for this pass, then reports it ready.
  absl::Status TensorDone(const TensorRange& range, const GradientReadyFn& on_ready);
  // Adds the time of the upload last timed in `slot` once it finished (wait: block
  // until it has; else only if it already has).
  absl::Status HarvestUpload(int slot, bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);

  static constexpr int kUploadSlots = 64;
  static constexpr int kPrefetchSlots = 64;

  ModelDef model_;
  int device_;
  std::atomic<int64_t> copy_nanos_{0};  // SetParameters and CopyGradients, not yet taken.
  cudaStream_t stream_ = nullptr;        // Compute.
  cudaStream_t copy_stream_ = nullptr;   // Uploads and downloads, in order.
  float* pinned_parameters_ = nullptr;   // Staging of uploads (cudaMallocHost).
  float* pinned_gradients_ = nullptr;    // Staging of gradient downloads (CopyGradients).
  // Where StageGradients downloads to: pinned_gradients_, or the buffer UseGradientBuffer
  // registered (registered_gradients_, unregistered on destruction).
  float* stage_into_ = nullptr;
  float* registered_gradients_ = nullptr;
  float* pinned_readback_ = nullptr;     // Staging of parameter downloads.
  std::vector<cudaEvent_t> tensor_done_;  // Per tensor (no timing).
  // Everything enqueued on copy_stream_ (uploads, downloads) and its bookkeeping.
  absl::Mutex copy_mu_;
  CopyLedger uploads_ ABSL_GUARDED_BY(copy_mu_);
  uint64_t next_upload_ ABSL_GUARDED_BY(copy_mu_) = 1;
  // Upload `seq` records its begin and end events in slot seq % kUploadSlots; a later
  // upload in the same slot implies the earlier one finished (one in-order stream).
  cudaEvent_t upload_begin_[kUploadSlots] = {};
  cudaEvent_t upload_end_[kUploadSlots] = {};
  bool upload_untimed_[kUploadSlots] ABSL_GUARDED_BY(copy_mu_) = {};
  cudaEvent_t download_begin_ = nullptr;
  cudaEvent_t download_end_ = nullptr;
  // Gradient downloads PrefetchGradients started, by pass (ForwardBackward counts them):
  // slot i's copy lies between prefetch_begin_[i] and prefetch_end_[i]. An untaken
  // download's time is not counted in copy_nanos_.
  DownloadBook prefetches_ ABSL_GUARDED_BY(copy_mu_){kPrefetchSlots};
  uint64_t pass_ ABSL_GUARDED_BY(copy_mu_) = 0;
  cudaEvent_t prefetch_begin_[kPrefetchSlots] = {};
  cudaEvent_t prefetch_end_[kPrefetchSlots] = {};
  // The inner optimizer's state (slots x num_parameters, allocated at the first
  // InnerUpdate, zeroed) and the event after the latest InnerUpdate's kernel.
  float* inner_state_ = nullptr;
  int inner_slots_ = -1;
  cudaEvent_t inner_done_ = nullptr;
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
