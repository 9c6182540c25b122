// The replica interface: one model copy that runs forward/backward on its slice of
// a batch. The worker holds R of them (one per device, each driven by its own
// thread) and the single-process trainer drives the same objects, so both take
// the same split/sum path.
//
// Contract (what the rest of the system relies on):
//  - Gradients are SUMS over the batch's samples (the loss is summed, not
//    averaged): the gradients of a batch split across replicas, added up, equal the
//    gradient of the whole batch. Whoever applies them divides by the total count.
//  - ForwardBackward overwrites the replica's whole gradient buffer.
//  - Backward reports each parameter tensor's gradient (or each row piece of a large
//    one) as final through GradientReadyFn, in strictly decreasing offset order (last
//    layer first, bias before weight): when it reports offset o, gradients
//    [o, num_parameters) are final.
//  - Dropout masks depend on (seed, step, dataset sample id, layer, element) only
//    (native engine; the TorchScript engine draws them from LibTorch's generator).
//  - Buffers (TorchScript models: BatchNorm running statistics): the flat buffer's
//    [num_trained, num_parameters) holds them. Each pass starts from those values;
//    after the forward pass the job's buffer source replica writes its updated
//    buffers into the same slots of its gradient buffer and every other replica
//    writes zeros, so any sum over replicas carries the source's values exactly.
//    Those slots are reported ready first (they hold the highest offsets).
//  - A replica is not thread-safe: one thread drives it. Different replicas may run
//    concurrently; CPU replicas may share one read-only parameter buffer. One
//    exception: SetParameters may be called from another thread while ForwardBackward
//    runs, for a range the pass has not yet asked for through the parameters-needed
//    hook (the worker applies an update while the next forward starts).
//
//   std::unique_ptr<Replica> r = CreateCpuReplica(model, params.data());
//   LossStats s = *r->ForwardBackward(batch, {seed, step},
//       [&](int tensor, int64_t offset, int64_t length) { push.Ready(offset, length); });
//   r->CopyGradients(0, model.num_parameters, sum.data());
#ifndef TRIBUTARY_WORKER_ENGINE_REPLICA_H_
#define TRIBUTARY_WORKER_ENGINE_REPLICA_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/optimizer_step.h"
#include "worker/engine/model.h"

namespace tributary::engine {

// A batch (or a replica's slice of one) in host memory. Exactly one of features /
// int_features is set (count * the sample's values each, sample-major), and one of
// labels / int_targets / float_targets (the dataset's kinds, dataset.h).
struct Batch {
  const float* features = nullptr;       // Float inputs.
  const int64_t* int_features = nullptr;  // Integer inputs (TorchScript models only).
  const int32_t* labels = nullptr;       // count class ids in [0, num_classes).
  const int64_t* int_targets = nullptr;  // Integer targets (TorchScript with `loss`).
  const float* float_targets = nullptr;  // Float targets (TorchScript with `loss`).
  const uint64_t* sample_ids = nullptr;  // count dataset indices: key the dropout masks.
  int64_t count = 0;
};

// What makes a training step's dropout masks: the job seed and the global step.
struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;
};

// Summed over the samples of the batch.
struct LossStats {
  // Sum of the loss's elements: the samples' cross-entropy losses (natural log), or
  // every element a model's own `loss` returned (one per token for [N, T]).
  double loss_sum = 0;
  int64_t correct = 0;  // Samples whose highest score is their label (first max wins).
  int64_t samples = 0;
  // The loss's elements: samples for the cross-entropy, N * T for a [N, T] loss. The
  // mean loss (and the gradient the optimizer gets) is over these.
  int64_t loss_elements = 0;
  // False for a model with its own loss (no class scores to count `correct` over).
  bool classified = true;
  // The model's `metrics` (evaluation only): each summed over the samples, by name.
  std::map<std::string, double> metrics;

  LossStats& operator+=(const LossStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    samples += o.samples;
    loss_elements += o.loss_elements;
    classified = classified && o.classified;
    for (const auto& [name, value] : o.metrics) metrics[name] += value;
    return *this;
  }
  double mean_loss() const {
    const int64_t n = loss_elements > 0 ? loss_elements : samples;
    return n == 0 ? 0 : loss_sum / n;
  }
  // -1 for a model with its own loss (no accuracy to speak of).
  double accuracy() const {
    if (!classified) return -1;
    return samples == 0 ? 0 : static_cast<double>(correct) / samples;
  }
  // Each metric divided by the samples it was summed over.
  std::map<std::string, double> MeanMetrics() const {
    std::map<std::string, double> mean;
    for (const auto& [name, value] : metrics) mean[name] = samples == 0 ? 0 : value / samples;
    return mean;
  }
};

// tensor: index into ModelDef::tensors; [offset, offset + length) of the flat buffer.
using GradientReadyFn = std::function<void(int tensor, int64_t offset, int64_t length)>;

// Called before the forward pass first reads parameters [offset, offset + length) (a
// layer's weight and bias, or one row piece of a large weight, then its bias), in the
// order the pass reads them: the native CPU engine reads a large linear weight's row
// pieces last first (common/row_pieces.h), and may call it from its product threads,
// one piece each. It may block until that range holds the step's parameters, and on a
// GPU replica call SetParameters for it: the next step's forward can then start while
// other partitions of the previous update are still arriving.
using ParametersNeededFn = std::function<void(int64_t offset, int64_t length)>;

class Replica {
 public:
  virtual ~Replica() = default;

  virtual const ModelDef& model() const = 0;
  // "cpu" or "cuda:N".
  virtual std::string device() const = 0;
  // Whether ForwardBackward reads no parameter of the host buffer in [o,
  // num_parameters) once it reported offset o ready, so that the worker may receive
  // that range's update into the shared parameters while the pass goes on
  // (PsConnection::ExpectUpdateInto). False unless the engine guarantees it (a CPU
  // replica that reads the shared buffer layer by layer; a GPU replica, which never
  // reads the host buffer in a pass).
  virtual bool DoneWithParametersWhenReady() const { return false; }
  // Whether the replica computes on the host parameter buffer itself (SetParameters
  // copies nothing): values written there are current for it as soon as they lie
  // there. False unless the engine guarantees it (a CPU replica).
  virtual bool ReadsHostParameters() const { return false; }

  // Makes [offset, offset + length) of the host parameter buffer `host` current on
  // this replica before the next ForwardBackward/Evaluate. CPU replicas that read a
  // shared host buffer copy nothing (host must be that buffer); GPU replicas copy the
  // range to the device. The caller must not change the buffer while a call runs; a
  // GPU replica uploading from page-locked memory (RegisterHostMemory, the worker's
  // parameter buffer) only enqueues the copy, so there the caller leaves the range
  // unchanged until the replica's next gradient download of any range (CopyGradients,
  // StageGradients: it follows the next pass's forward, which read the upload) or its
  // destruction.
  virtual absl::Status SetParameters(const float* host, int64_t offset, int64_t length) = 0;

  // Forward and backward over `batch` with dropout keyed by `key`. Overwrites the
  // gradient buffer with the summed gradient; calls on_ready (may be empty) per tensor.
  // GPU: on_ready fires once the tensor's gradient work is enqueued on the replica's
  // stream, i.e. work enqueued on that stream afterwards sees the final values;
  // CopyGradients synchronises. An empty batch gives zero gradients.
  virtual absl::StatusOr<LossStats> ForwardBackward(const Batch& batch, const DropoutKey& key,
                                                    const GradientReadyFn& on_ready) = 0;

  // Forward only, dropout off: loss and accuracy of the batch.
  virtual absl::StatusOr<LossStats> Evaluate(const Batch& batch) = 0;

  // Copies gradient elements [offset, offset + length) to host memory dst.
  virtual absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) = 0;

  // The gradient buffer in host memory when the replica keeps it there (CPU), else null.
  virtual const float* host_gradients() const { return nullptr; }
  // Makes the replica keep its host gradients at `buffer` (num_parameters floats that
  // outlive it) instead of memory of its own, before its first pass: the worker puts it
  // in memory shared with the PS shards, so that a push goes out from where backward
  // wrote it. A CPU replica computes into it (host_gradients() returns it); a GPU
  // replica stages its downloads there (StageGradients returns into it). False where
  // the replica cannot (the default: it keeps its gradients elsewhere).
  virtual bool UseGradientBuffer(float* buffer) { return false; }

  // Brings gradient elements [offset, offset + length) to host memory the replica owns
  // and returns where element `offset` lies there, so that the worker pushes them from
  // there instead of copying them into a buffer of its own (a GPU replica: its pinned
  // staging, downloaded into directly). The values stay there until the replica's next
  // ForwardBackward. CPU replicas: host_gradients() + offset. UNIMPLEMENTED where the
  // replica has no such memory (then CopyGradients).
  virtual absl::StatusOr<const float*> StageGradients(int64_t offset, int64_t length) {
    if (host_gradients() != nullptr) return host_gradients() + offset;
    return absl::UnimplementedError(device() + ": no host memory of its own for gradients");
  }
  // Optional, in the pass that computed [offset, offset + length) and before that
  // range's StageGradients: starts bringing it to the same place now, after the pass
  // reported it ready, without waiting for it, so that the downloads of the ranges a
  // pass finished run back to back on the device while the worker pushes the ones
  // already down (a GPU replica's StageGradients then only waits for that download).
  // A hint: OK with nothing done by default (CPU replicas, whose gradients already lie
  // on the host), or when the replica cannot start it now.
  virtual absl::Status PrefetchGradients(int64_t offset, int64_t length) {
    return absl::OkStatus();
  }

  // Seconds spent copying parameters and gradients between host and device
  // (SetParameters, CopyGradients) since the previous call; always 0 where the
  // replica computes on host memory (CPU). Thread-safe.
  virtual double TakeCopySeconds() { return 0; }

  // LOCAL_SGD's inner step where the replica keeps its parameters (issue 25: a GPU
  // replica runs one fused kernel over the range after the pass's backward, and no
  // parameter or gradient crosses PCIe inside a round): parameters [offset, offset +
  // length) updated with the mean gradient, the replica's own gradient sum / divisor,
  // by `c` (optimizer_step.h, what Optimizer::ApplyMean does on the host). The
  // optimizer state, `slots` floats per element, is the replica's: zero when it was
  // created, kept per range in the worker's layout (slots x length at slots x offset).
  // Only where AppliesInnerUpdate(); the worker updates host parameters otherwise.
  virtual bool AppliesInnerUpdate() const { return false; }
  virtual absl::Status InnerUpdate(const UpdateCoefficients& c, int slots, int64_t offset,
                                   int64_t length, float divisor) {
    return absl::UnimplementedError(device() + ": no inner update on the replica");
  }
  // Copies the replica's current parameters [offset, offset + length) to host memory
  // dst (after InnerUpdate: the values it wrote). Where AppliesInnerUpdate().
  virtual absl::Status CopyParameters(int64_t offset, int64_t length, float* dst) {
    return absl::UnimplementedError(device() + ": parameters live in the host buffer");
  }

  // Installs a hook ForwardBackward calls before each layer's parameters are first
  // read (not Evaluate). Empty (the default) means the parameters are always current.
  void set_parameters_needed(ParametersNeededFn hook) { parameters_needed_ = std::move(hook); }

  // Makes this replica the job's buffer source (see the contract above). One replica
  // of the whole job: replica 0 of node 0's leading process (DDP's rank 0, whose
  // buffers broadcast_buffers=True hands to every rank). Default false.
  void set_buffer_source(bool source) { buffer_source_ = source; }
  bool buffer_source() const { return buffer_source_; }

 protected:
  ParametersNeededFn parameters_needed_;
  bool buffer_source_ = false;
};

// Checks a batch against the model: pointers set, labels in range. For replicas.
absl::Status CheckBatch(const ModelDef& model, const Batch& batch);

// Checks that [offset, offset + length) lies in a buffer of `total` elements.
absl::Status CheckRange(const char* what, int64_t offset, int64_t length, int64_t total);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_REPLICA_H_
