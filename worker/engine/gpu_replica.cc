#include "worker/engine/gpu_replica.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/gpu_kernels.h"

namespace tributary::engine {
namespace {

absl::Status CudaError(int device, cudaError_t error, const char* expr) {
  return absl::InternalError(absl::StrCat("cuda:", device, ": ", expr,
                                          " failed: ", cudaGetErrorName(error), ": ",
                                          cudaGetErrorString(error)));
}

absl::Status CublasError(int device, cublasStatus_t status, const char* expr) {
  return absl::InternalError(absl::StrCat("cuda:", device, ": ", expr,
                                          " failed: ", cublasGetStatusName(status), ": ",
                                          cublasGetStatusString(status)));
}

#define CUDA_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                             \
    const cudaError_t cuda_error_ = (expr);                                        \
    if (cuda_error_ != cudaSuccess) return CudaError(device_, cuda_error_, #expr); \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                      \
  do {                                                    \
    const cublasStatus_t cublas_status_ = (expr);         \
    if (cublas_status_ != CUBLAS_STATUS_SUCCESS) {        \
      return CublasError(device_, cublas_status_, #expr); \
    }                                                     \
  } while (0)

gpu::Window WindowOf(const LayerSpec& l) {
  gpu::Window w;
  w.channels = l.in.channels;
  w.height = l.in.height;
  w.width = l.in.width;
  w.out_channels = l.out.channels;
  w.out_height = l.out.height;
  w.out_width = l.out.width;
  w.kernel = l.kernel;
  w.stride = l.stride;
  w.padding = l.padding;
  return w;
}

}  // namespace

int GpuDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    if (why != nullptr) {
      *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(error), ": ",
                          cudaGetErrorString(error));
    }
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount found 0 devices";
  return count;
}

absl::Status RegisterHostMemory(void* p, size_t bytes) {
  const cudaError_t error = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Not sticky: clear it, so that later calls do not report it.
    return absl::UnavailableError(absl::StrCat("cudaHostRegister of ", bytes, " bytes: ",
                                               cudaGetErrorName(error), ": ",
                                               cudaGetErrorString(error)));
  }
  return absl::OkStatus();
}

void UnregisterHostMemory(void* p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

namespace {

// Whether a copy can read `p` by DMA: cudaMallocHost'ed or registered host memory.
bool PageLocked(const void* p) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

GpuReplica::GpuReplica(const ModelDef& model, int device) : model_(model), device_(device) {}

absl::StatusOr<std::unique_ptr<GpuReplica>> GpuReplica::Create(const ModelDef& model, int device,
                                                               const float* host_parameters) {
  std::string why;
  const int count = GpuDeviceCount(&why);
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU replica on cuda:", device, ": this process sees ", count,
                     " CUDA device(s)", why.empty() ? "" : absl::StrCat(" (", why, ")")));
  }
  std::unique_ptr<GpuReplica> replica(new GpuReplica(model, device));
  if (absl::Status status = replica->Init(host_parameters); !status.ok()) return status;
  return replica;
}

absl::Status GpuReplica::Init(const float* host_parameters) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  tensor_done_.assign(model_.tensors.size(), nullptr);
  for (cudaEvent_t& event : tensor_done_) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  for (int slot = 0; slot < kUploadSlots; ++slot) {
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&upload_begin_[slot]));
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&upload_end_[slot]));
  }
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&download_begin_));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&download_end_));
  for (int slot = 0; slot < kPrefetchSlots; ++slot) {
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&prefetch_begin_[slot]));
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&prefetch_end_[slot]));
  }
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&inner_done_, cudaEventDisableTiming));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  // Plain FP32 products (no TF32), so results stay within float tolerance of the CPU.
  CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  const size_t bytes = model_.num_parameters * sizeof(float);
  CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&parameters_), bytes));
  CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&gradients_), bytes));
  CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&pinned_parameters_), bytes));
  CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&pinned_gradients_), bytes));
  stage_into_ = pinned_gradients_;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&pinned_readback_), bytes));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(gradients_, 0, bytes, stream_));
  // Downloads before the first pass read the zeros.
  for (cudaEvent_t event : tensor_done_) CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream_));
  if (absl::Status uploaded = SetParameters(host_parameters, 0, model_.num_parameters);
      !uploaded.ok()) {
    return uploaded;
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_));
  {
    absl::MutexLock lock(&copy_mu_);
    for (int slot = 0; slot < kUploadSlots; ++slot) {
      if (absl::Status s = HarvestUpload(slot, /*wait=*/true); !s.ok()) return s;
    }
  }
  copy_nanos_ = 0;  // The first upload is set-up, not a step's copy.
  return absl::OkStatus();
}

GpuReplica::~GpuReplica() {
  // Errors cannot be reported from a destructor; the device is released regardless.
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  for (void* p : allocations_) cudaFree(p);
  if (parameters_ != nullptr) cudaFree(parameters_);
  if (gradients_ != nullptr) cudaFree(gradients_);
  if (pinned_parameters_ != nullptr) cudaFreeHost(pinned_parameters_);
  if (pinned_gradients_ != nullptr) cudaFreeHost(pinned_gradients_);
  if (registered_gradients_ != nullptr) UnregisterHostMemory(registered_gradients_);
  if (pinned_readback_ != nullptr) cudaFreeHost(pinned_readback_);
  for (cudaEvent_t event : tensor_done_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  for (int slot = 0; slot < kUploadSlots; ++slot) {
    if (upload_begin_[slot] != nullptr) cudaEventDestroy(upload_begin_[slot]);
    if (upload_end_[slot] != nullptr) cudaEventDestroy(upload_end_[slot]);
  }
  if (inner_state_ != nullptr) cudaFree(inner_state_);
  if (inner_done_ != nullptr) cudaEventDestroy(inner_done_);
  if (download_begin_ != nullptr) cudaEventDestroy(download_begin_);
  if (download_end_ != nullptr) cudaEventDestroy(download_end_);
  for (int slot = 0; slot < kPrefetchSlots; ++slot) {
    if (prefetch_begin_[slot] != nullptr) cudaEventDestroy(prefetch_begin_[slot]);
    if (prefetch_end_[slot] != nullptr) cudaEventDestroy(prefetch_end_[slot]);
  }
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string GpuReplica::device() const { return absl::StrCat("cuda:", device_); }

absl::Status GpuReplica::SetParameters(const float* host, int64_t offset, int64_t length) {
  if (absl::Status range =
          CheckRange("gpu replica parameters", offset, length, model_.num_parameters);
      !range.ok()) {
    return range;
  }
  if (length == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::MutexLock lock(&copy_mu_);
  const size_t bytes = static_cast<size_t>(length) * sizeof(float);
  // Page-locked host memory (the worker's parameter buffer, where the driver allowed
  // it) is uploaded from directly; anything else through the staging.
  const bool direct = PageLocked(host + offset);
  if (!direct) {
    // The staging range may still feed the range's previous upload (normally long done).
    if (std::optional<uint64_t> previous = uploads_.Latest(offset, length)) {
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(upload_end_[*previous % kUploadSlots]));
    }
    std::memcpy(pinned_parameters_ + offset, host + offset, bytes);
  }
  // The pass still running reads these parameters until its backward is past them.
  if (absl::Status s = WaitForTensors(copy_stream_, offset, length); !s.ok()) return s;
  const uint64_t seq = next_upload_++;
  const int slot = static_cast<int>(seq % kUploadSlots);
  if (absl::Status s = HarvestUpload(slot, /*wait=*/true); !s.ok()) return s;
  CUDA_RETURN_IF_ERROR(cudaEventRecord(upload_begin_[slot], copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(parameters_ + offset,
                                       (direct ? host : pinned_parameters_) + offset, bytes,
                                       cudaMemcpyHostToDevice, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(upload_end_[slot], copy_stream_));
  upload_untimed_[slot] = true;
  uploads_.Recorded(offset, length, seq);
  // Not waited for (issue 25: a wait per partition on the update's way to the next
  // forward). The staging's next write waits for it above; page-locked memory is the
  // caller's, left unchanged until a later download returned (Replica::SetParameters),
  // which the in-order copy stream runs after this upload.
  return absl::OkStatus();
}

absl::Status GpuReplica::HarvestUpload(int slot, bool wait) {
  if (!upload_untimed_[slot]) return absl::OkStatus();
  if (wait) {
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(upload_end_[slot]));
  } else {
    const cudaError_t query = cudaEventQuery(upload_end_[slot]);
    if (query == cudaErrorNotReady) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(query);
  }
  float milliseconds = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&milliseconds, upload_begin_[slot], upload_end_[slot]));
  copy_nanos_ += static_cast<int64_t>(milliseconds * 1e6);
  upload_untimed_[slot] = false;
  return absl::OkStatus();
}

absl::Status GpuReplica::WaitForTensors(cudaStream_t stream, int64_t offset, int64_t length) {
  const int64_t end = offset + length;
  for (int t = model_.TensorAt(offset); t < static_cast<int>(model_.tensors.size()) &&
                                        model_.tensors[t].offset < end;
       ++t) {
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, tensor_done_[t], 0));
  }
  return absl::OkStatus();
}

absl::Status GpuReplica::WaitForUploads(int64_t offset, int64_t length) {
  absl::MutexLock lock(&copy_mu_);
  if (std::optional<uint64_t> latest = uploads_.Latest(offset, length)) {
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, upload_end_[*latest % kUploadSlots], 0));
  }
  return absl::OkStatus();
}

absl::Status GpuReplica::TensorDone(const TensorRange& range, const GradientReadyFn& on_ready) {
  const int tensor = model_.TensorAt(range.offset);
  CUDA_RETURN_IF_ERROR(cudaEventRecord(tensor_done_[tensor], stream_));
  if (on_ready) on_ready(tensor, range.offset, range.length);
  return absl::OkStatus();
}

absl::Status GpuReplica::CopyGradients(int64_t offset, int64_t length, float* dst) {
  // Only the range's own tensors: the layers before it may still be computing.
  return Download("gpu replica gradients", gradients_, offset, length, pinned_gradients_, dst,
                  [&]() { return WaitForTensors(copy_stream_, offset, length); });
}

absl::Status GpuReplica::PrefetchGradients(int64_t offset, int64_t length) {
  if (absl::Status range =
          CheckRange("gpu replica gradients", offset, length, model_.num_parameters);
      !range.ok()) {
    return range;
  }
  if (length == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::MutexLock lock(&copy_mu_);
  const std::optional<int> slot = prefetches_.Start(offset, length, pass_);
  if (!slot.has_value()) return absl::OkStatus();  // Started already, or no slot free.
  // After the pass computed the range (its tensors' events), not before.
  if (absl::Status s = WaitForTensors(copy_stream_, offset, length); !s.ok()) return s;
  return EnqueueDownload(gradients_, offset, length, stage_into_, prefetch_begin_[*slot],
                         prefetch_end_[*slot]);
}

absl::StatusOr<const float*> GpuReplica::StageGradients(int64_t offset, int64_t length) {
  {
    absl::MutexLock lock(&copy_mu_);
    if (const std::optional<int> slot = prefetches_.Take(offset, length, pass_)) {
      // This pass's download of exactly this range, started by PrefetchGradients.
      CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
      if (absl::Status s = FinishDownload(prefetch_begin_[*slot], prefetch_end_[*slot]); !s.ok()) {
        return s;
      }
      return stage_into_ + offset;
    }
  }
  if (absl::Status s = Download("gpu replica gradients", gradients_, offset, length, stage_into_,
                                /*dst=*/nullptr,
                                [&]() { return WaitForTensors(copy_stream_, offset, length); });
      !s.ok()) {
    return s;
  }
  return stage_into_ + offset;
}

bool GpuReplica::UseGradientBuffer(float* buffer) {
  if (buffer == nullptr || registered_gradients_ != nullptr) return false;
  if (cudaSetDevice(device_) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // The driver may refuse (the session then says the replica keeps its gradients).
  if (!RegisterHostMemory(buffer, static_cast<size_t>(model_.num_parameters) * sizeof(float))
           .ok()) {
    return false;
  }
  registered_gradients_ = buffer;
  stage_into_ = buffer;
  return true;
}

absl::Status GpuReplica::Download(const char* what, const float* device, int64_t offset,
                                  int64_t length, float* staging, float* dst,
                                  const std::function<absl::Status()>& after) {
  if (absl::Status range = CheckRange(what, offset, length, model_.num_parameters); !range.ok()) {
    return range;
  }
  if (length == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::MutexLock lock(&copy_mu_);
  if (absl::Status s = after(); !s.ok()) return s;
  if (absl::Status s =
          EnqueueDownload(device, offset, length, staging, download_begin_, download_end_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FinishDownload(download_begin_, download_end_); !s.ok()) return s;
  if (dst != nullptr) {
    std::memcpy(dst, staging + offset, static_cast<size_t>(length) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status GpuReplica::EnqueueDownload(const float* device, int64_t offset, int64_t length,
                                         float* staging, cudaEvent_t begin, cudaEvent_t end) {
  CUDA_RETURN_IF_ERROR(cudaEventRecord(begin, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging + offset, device + offset,
                                       static_cast<size_t>(length) * sizeof(float),
                                       cudaMemcpyDeviceToHost, copy_stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(end, copy_stream_));
  return absl::OkStatus();
}

absl::Status GpuReplica::FinishDownload(cudaEvent_t begin, cudaEvent_t end) {
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
  float milliseconds = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&milliseconds, begin, end));
  copy_nanos_ += static_cast<int64_t>(milliseconds * 1e6);
  return absl::OkStatus();
}

absl::Status GpuReplica::InnerUpdate(const UpdateCoefficients& c, int slots, int64_t offset,
                                     int64_t length, float divisor) {
  if (absl::Status range = CheckRange("gpu replica inner update", offset, length,
                                      model_.num_parameters);
      !range.ok()) {
    return range;
  }
  if (slots < 0 || slots > 2 || (inner_slots_ >= 0 && slots != inner_slots_)) {
    return absl::InvalidArgumentError(absl::StrCat("gpu replica inner update: ", slots,
                                                   " state slots per element (was ",
                                                   inner_slots_, ")"));
  }
  if (!(divisor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu replica inner update: divisor ", divisor, " must be > 0"));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (inner_slots_ < 0) {
    inner_slots_ = slots;
    if (slots > 0) {
      const size_t bytes = static_cast<size_t>(slots) * model_.num_parameters * sizeof(float);
      CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&inner_state_), bytes));
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(inner_state_, 0, bytes, stream_));
    }
  }
  if (length == 0) return absl::OkStatus();
  // After the pass's backward (same stream) and the latest upload of the range (the
  // round's new values).
  if (absl::Status s = WaitForUploads(offset, length); !s.ok()) return s;
  float* state = inner_state_ == nullptr ? nullptr : inner_state_ + offset * inner_slots_;
  CUDA_RETURN_IF_ERROR(gpu::ApplyMean(c, parameters_ + offset, gradients_ + offset, divisor, state,
                                      length, stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(inner_done_, stream_));
  return absl::OkStatus();
}

absl::Status GpuReplica::CopyParameters(int64_t offset, int64_t length, float* dst) {
  // The values the latest inner update and upload wrote (inner_done_ was never
  // recorded without an inner update: the wait is then a no-op; the uploads come
  // before on the same copy stream).
  return Download("gpu replica parameters", parameters_, offset, length, pinned_readback_, dst,
                  [&]() {
                    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, inner_done_, 0));
                    return absl::OkStatus();
                  });
}

double GpuReplica::TakeCopySeconds() {
  {
    absl::MutexLock lock(&copy_mu_);
    for (int slot = 0; slot < kUploadSlots; ++slot) {
      // An error here surfaces from the next copy or pass, which checks every call.
      HarvestUpload(slot, /*wait=*/false).IgnoreError();
    }
  }
  return copy_nanos_.exchange(0) * 1e-9;
}

absl::Status GpuReplica::Reserve(int64_t n) {
  if (n <= capacity_) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  for (void* p : allocations_) CUDA_RETURN_IF_ERROR(cudaFree(p));
  allocations_.clear();
  const size_t layers = model_.layers.size();
  activations_.assign(layers + 1, nullptr);
  dropout_scale_.assign(layers, nullptr);
  pool_argmax_.assign(layers, nullptr);
  columns_.assign(layers, nullptr);
  auto allocate = [&](void** out, int64_t elements, size_t element_bytes) -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaMalloc(out, std::max<int64_t>(1, elements) * element_bytes));
    allocations_.push_back(*out);
    return absl::OkStatus();
  };
#define ALLOCATE(ptr, elements, type)                                                        \
  if (absl::Status s = allocate(reinterpret_cast<void**>(&(ptr)), (elements), sizeof(type)); \
      !s.ok()) {                                                                             \
    return s;                                                                                \
  }
  int64_t widest = model_.num_classes, dcol = 0, partials = 0;
  for (size_t i = 0; i < layers; ++i) {
    const LayerSpec& l = model_.layers[i];
    widest = std::max({widest, l.in.size(), l.out.size()});
    ALLOCATE(activations_[i], n * l.in.size(), float);
    if (l.kind == LayerKind::kDropout) ALLOCATE(dropout_scale_[i], n * l.out.size(), float);
    if (l.kind == LayerKind::kMaxPool2d) ALLOCATE(pool_argmax_[i], n * l.out.size(), int32_t);
    if (l.kind == LayerKind::kConv2d) {
      const int64_t ckk = l.in.channels * l.kernel * l.kernel;
      const int64_t ohw = l.out.height * l.out.width;
      ALLOCATE(columns_[i], n * ckk * ohw, float);
      dcol = std::max(dcol, n * ckk * ohw);
      partials = std::max(partials, n * ckk * l.out.channels);
    }
  }
  ALLOCATE(activations_[layers], n * model_.num_classes, float);
  ALLOCATE(grad_a_, n * widest, float);
  ALLOCATE(grad_b_, n * widest, float);
  ALLOCATE(dcol_, dcol, float);
  ALLOCATE(weight_partials_, partials, float);
  ALLOCATE(ones_, n, float);
  ALLOCATE(loss_, n, float);
  ALLOCATE(correct_, n, int32_t);
  ALLOCATE(labels_, n, int32_t);
  ALLOCATE(sample_ids_, n, uint64_t);
#undef ALLOCATE
  CUDA_RETURN_IF_ERROR(gpu::Fill(ones_, 1.0f, n, stream_));
  capacity_ = n;
  return absl::OkStatus();
}

absl::Status GpuReplica::Upload(const Batch& batch) {
  const int64_t n = batch.count;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(activations_[0], batch.features,
                                       n * model_.input.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(labels_, batch.labels, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_ids_, batch.sample_ids, n * sizeof(uint64_t),
                                       cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::StatusOr<LossStats> GpuReplica::RunForward(const Batch& batch, const DropoutKey* dropout) {
  const int64_t n = batch.count;
  const float one = 1.0f, zero = 0.0f;
  for (size_t i = 0; i < model_.layers.size(); ++i) {
    const LayerSpec& l = model_.layers[i];
    const float* x = activations_[i];
    float* y = activations_[i + 1];
    const int64_t in_size = l.in.size();
    const int64_t out_size = l.out.size();
    // Training passes only: Evaluate runs without a dropout key.
    if (dropout != nullptr && parameters_needed_ && l.has_parameters()) {
      parameters_needed_(l.weight.offset, l.weight.length + l.bias.length);
    }
    // The layer's kernels start once the latest upload of its parameters landed.
    if (l.has_parameters()) {
      if (absl::Status s = WaitForUploads(l.weight.offset, l.weight.length + l.bias.length);
          !s.ok()) {
        return s;
      }
    }
    switch (l.kind) {
      case LayerKind::kLinear:
        // Row-major Y[n, out] = X[n, in] W[out, in]^T; in cuBLAS's column-major terms
        // Y^T = op_T(W) X^T.
        CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out_size, n, in_size,
                                           &one, parameters_ + l.weight.offset, in_size, x, in_size,
                                           &zero, y, out_size));
        CUDA_RETURN_IF_ERROR(
            gpu::AddBiasRows(y, parameters_ + l.bias.offset, n, out_size, stream_));
        break;
      case LayerKind::kConv2d: {
        const gpu::Window w = WindowOf(l);
        const int64_t ckk = l.in.channels * l.kernel * l.kernel;
        const int64_t ohw = l.out.height * l.out.width;
        CUDA_RETURN_IF_ERROR(gpu::Im2Col(x, columns_[i], n, w, stream_));
        // Per sample, row-major out[oc, ohw] = W[oc, ckk] col[ckk, ohw].
        CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
            cublas_, CUBLAS_OP_N, CUBLAS_OP_N, ohw, l.out.channels, ckk, &one, columns_[i], ohw,
            ckk * ohw, parameters_ + l.weight.offset, ckk, 0, &zero, y, ohw, l.out.channels * ohw,
            n));
        CUDA_RETURN_IF_ERROR(
            gpu::AddBiasChannels(y, parameters_ + l.bias.offset, n, l.out.channels, ohw, stream_));
        break;
      }
      case LayerKind::kMaxPool2d:
        CUDA_RETURN_IF_ERROR(gpu::MaxPoolForward(x, y, pool_argmax_[i], n, WindowOf(l), stream_));
        break;
      case LayerKind::kRelu:
        CUDA_RETURN_IF_ERROR(gpu::ReluForward(x, y, n * out_size, stream_));
        break;
      case LayerKind::kTanh:
        CUDA_RETURN_IF_ERROR(gpu::TanhForward(x, y, n * out_size, stream_));
        break;
      case LayerKind::kDropout:
        if (dropout != nullptr) {
          CUDA_RETURN_IF_ERROR(gpu::DropoutForward(x, y, dropout_scale_[i], sample_ids_, n,
                                                   out_size, dropout->seed, dropout->step,
                                                   l.dropout_index, l.dropout, stream_));
          break;
        }
        [[fallthrough]];
      case LayerKind::kFlatten:
        CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(y, x, n * in_size * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
        break;
    }
  }
  CUDA_RETURN_IF_ERROR(gpu::SoftmaxCrossEntropy(activations_.back(), labels_, n, model_.num_classes,
                                                loss_, correct_, grad_a_, stream_));
  return LossStats{};
}

absl::Status GpuReplica::RunBackward(const Batch& batch, const DropoutKey* dropout,
                                     const GradientReadyFn& on_ready) {
  const int64_t n = batch.count;
  const float one = 1.0f, zero = 0.0f;
  // A tensor is done once its gradient is computed and the pass reads its parameters no
  // more (after the input gradient's product): its gradient may then go down and its
  // next values come up (CopyGradients, SetParameters wait for this event).
  auto done = [&](const LayerSpec& l) -> absl::Status {
    if (absl::Status s = TensorDone(l.bias, on_ready); !s.ok()) return s;
    return TensorDone(l.weight, on_ready);
  };
  float* dy = grad_a_;
  float* dx = grad_b_;
  for (size_t i = model_.layers.size(); i-- > 0;) {
    const LayerSpec& l = model_.layers[i];
    const float* x = activations_[i];
    const float* y = activations_[i + 1];
    const int64_t in_size = l.in.size();
    const int64_t out_size = l.out.size();
    const bool need_input_grad = i > 0;
    bool wrote_dx = false;
    switch (l.kind) {
      case LayerKind::kLinear: {
        float* dw = gradients_ + l.weight.offset;
        // Row-major dW[out, in] = dY^T X  ->  column-major dW^T = X^T op_T(dY^T).
        CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, in_size, out_size, n,
                                           &one, x, in_size, dy, out_size, &zero, dw, in_size));
        CUDA_RETURN_IF_ERROR(gpu::SumRows(dy, n, out_size, gradients_ + l.bias.offset, stream_));
        if (need_input_grad) {
          // Row-major dX[n, in] = dY W.
          CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in_size, n,
                                             out_size, &one, parameters_ + l.weight.offset, in_size,
                                             dy, out_size, &zero, dx, in_size));
          wrote_dx = true;
        }
        if (absl::Status s = done(l); !s.ok()) return s;
        break;
      }
      case LayerKind::kConv2d: {
        const gpu::Window w = WindowOf(l);
        const int64_t ckk = l.in.channels * l.kernel * l.kernel;
        const int64_t ohw = l.out.height * l.out.width;
        const int64_t weights = l.out.channels * ckk;
        // Per sample, row-major partial[oc, ckk] = dout[oc, ohw] col[ckk, ohw]^T ...
        CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
            cublas_, CUBLAS_OP_T, CUBLAS_OP_N, ckk, l.out.channels, ohw, &one, columns_[i], ohw,
            ckk * ohw, dy, ohw, l.out.channels * ohw, &zero, weight_partials_, ckk, weights, n));
        // ... summed over the samples: dW = partials[weights, n] * ones[n].
        CUBLAS_RETURN_IF_ERROR(cublasSgemv(cublas_, CUBLAS_OP_N, weights, n, &one, weight_partials_,
                                           weights, ones_, 1, &zero, gradients_ + l.weight.offset,
                                           1));
        CUDA_RETURN_IF_ERROR(
            gpu::SumChannels(dy, n, l.out.channels, ohw, gradients_ + l.bias.offset, stream_));
        if (need_input_grad) {
          // Per sample, row-major dcol[ckk, ohw] = W[oc, ckk]^T dout[oc, ohw].
          CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
              cublas_, CUBLAS_OP_N, CUBLAS_OP_T, ohw, ckk, l.out.channels, &one, dy, ohw,
              l.out.channels * ohw, parameters_ + l.weight.offset, ckk, 0, &zero, dcol_, ohw,
              ckk * ohw, n));
          CUDA_RETURN_IF_ERROR(gpu::Col2Im(dcol_, dx, n, w, stream_));
          wrote_dx = true;
        }
        if (absl::Status s = done(l); !s.ok()) return s;
        break;
      }
      case LayerKind::kMaxPool2d:
        if (need_input_grad) {
          CUDA_RETURN_IF_ERROR(
              gpu::MaxPoolBackward(dy, pool_argmax_[i], dx, n, WindowOf(l), stream_));
          wrote_dx = true;
        }
        break;
      case LayerKind::kRelu:
        CUDA_RETURN_IF_ERROR(gpu::ReluBackward(y, dy, dx, n * out_size, stream_));
        wrote_dx = true;
        break;
      case LayerKind::kTanh:
        CUDA_RETURN_IF_ERROR(gpu::TanhBackward(y, dy, dx, n * out_size, stream_));
        wrote_dx = true;
        break;
      case LayerKind::kDropout:
        if (dropout != nullptr) {
          CUDA_RETURN_IF_ERROR(gpu::Multiply(dy, dropout_scale_[i], dx, n * out_size, stream_));
          wrote_dx = true;
        }
        break;
      case LayerKind::kFlatten:
        break;  // Same memory layout: dy is already the input gradient.
    }
    (void)in_size;
    if (wrote_dx) std::swap(dy, dx);
  }
  return absl::OkStatus();
}

absl::StatusOr<LossStats> GpuReplica::CollectLoss(int64_t n) {
  host_loss_.resize(n);
  host_correct_.resize(n);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_loss_.data(), loss_, n * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_correct_.data(), correct_, n * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  LossStats stats;
  stats.samples = n;
  for (int64_t s = 0; s < n; ++s) {
    stats.loss_sum += host_loss_[s];
    stats.correct += host_correct_[s];
  }
  return stats;
}

absl::StatusOr<LossStats> GpuReplica::ForwardBackward(const Batch& batch, const DropoutKey& key,
                                                      const GradientReadyFn& on_ready) {
  if (absl::Status status = CheckBatch(model_, batch); !status.ok()) return status;
  {
    // Downloads started for the previous pass are never taken for this one.
    absl::MutexLock lock(&copy_mu_);
    ++pass_;
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (batch.count == 0) {
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(gradients_, 0, model_.num_parameters * sizeof(float), stream_));
    for (int t = static_cast<int>(model_.tensors.size()); t-- > 0;) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(tensor_done_[t], stream_));
      if (on_ready) on_ready(t, model_.tensors[t].offset, model_.tensors[t].length);
    }
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return LossStats{};
  }
  absl::StatusOr<LossStats> stats = Pass(batch, &key, on_ready);
  if (!stats.ok()) SettleAfterError();
  return stats;
}

absl::StatusOr<LossStats> GpuReplica::Pass(const Batch& batch, const DropoutKey* key,
                                           const GradientReadyFn& on_ready) {
  if (absl::Status s = Reserve(batch.count); !s.ok()) return s;
  if (absl::Status s = Upload(batch); !s.ok()) return s;
  if (absl::StatusOr<LossStats> f = RunForward(batch, key); !f.ok()) return f.status();
  if (key != nullptr) {
    if (absl::Status s = RunBackward(batch, key, on_ready); !s.ok()) return s;
  }
  // Synchronizes stream_: every kernel of the pass is done when this returns.
  return CollectLoss(batch.count);
}

void GpuReplica::SettleAfterError() {
  // Errors here are the device's own; the pass's error is the one to report.
  cudaStreamSynchronize(stream_);
  for (cudaEvent_t event : tensor_done_) cudaEventRecord(event, stream_);
}

absl::StatusOr<LossStats> GpuReplica::Evaluate(const Batch& batch) {
  if (absl::Status status = CheckBatch(model_, batch); !status.ok()) return status;
  if (batch.count == 0) return LossStats{};
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  absl::StatusOr<LossStats> stats = Pass(batch, nullptr, {});
  if (!stats.ok()) SettleAfterError();
  return stats;
}

}  // namespace tributary::engine
