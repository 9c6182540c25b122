// The TorchScript engine: any module a user saved with torch.jit.script, run by
// Debian's LibTorch (CPU) behind the Replica interface, and the way a trained model
// goes back out as a TorchScript file. This header needs no LibTorch: in a build
// without it (third_party/torch) every function answers UNAVAILABLE saying so.
//
// The model's flat buffer: the module's trainable parameters in named_parameters()
// order, then its buffers in named_buffers() order and parameters with
// requires_grad=False (both "buffers": never trained, rank 0's values are the job's).
// Input: x of [N, *sample_dims], float32 or int64 as the data is (dataset.h).
// Loss: the module's own `@torch.jit.export def loss(self, x, y) -> Tensor` when it
// has one, returning the batch's losses unreduced ([N] or [N, ...], e.g. one per
// token; y as the data's targets are: int64 class ids [N], int64 or float32 [N, ...]);
// else the cross-entropy of forward(x)'s logits [N, classes] against class ids, as the
// native engine. Backward runs on the SUM of every element; LossStats.loss_elements
// counts them (the mean and the gradient the optimizer gets are over those). An
// optional `metrics(self, x, y) -> Dict[str, Tensor]` of scalars summed over the batch
// is added up over the evaluation set (LossStats.metrics). Initial values: the file's.
//
//   absl::StatusOr<ModelDef> model = LoadTorchScriptModel(bytes, "net.pt", &data.train);
//   std::unique_ptr<Replica> r = *CreateTorchScriptReplica(*model, params.data());
#ifndef TRIBUTARY_WORKER_ENGINE_TORCHSCRIPT_H_
#define TRIBUTARY_WORKER_ENGINE_TORCHSCRIPT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/model_file.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

// The largest model file the engine reads by default (tributary, train_local) is the
// coordinator's (common/job_spec.h): one limit wherever a file goes.
inline constexpr int64_t kDefaultMaxModelBytes = kMaxModelFileBytes;

// True when this binary was built with LibTorch.
bool BuiltWithTorch();

// "LibTorch 1.13.1 (CPU)", or why there is none.
std::string TorchDescription();

// Reads a model file whole (common/model_file.h).
using ::tributary::ReadModelFile;

// Loads a saved module and describes it: its tensors in the flat layout and their
// initial values. With `fit_to` (the training data) it also fits the model to it: the
// input shape and dtype are the data's, and one eval-mode pass over the first few
// samples gives the class count (no `loss`) or the loss's elements per sample, and
// checks `metrics`. INVALID_ARGUMENT naming file_name and the problem: not a
// TorchScript archive, no trainable parameter, a parameter that is not float32, a
// buffer of a type that has no float value; with fit_to, a pass that fails (with
// LibTorch's message and the dtype and shape it got), a forward that returns anything
// but one [N, classes] tensor, fewer classes than the labels need, a loss that is not
// one float tensor [N, ...], metrics that are not named scalars, non-finite values,
// targets other than class ids without a `loss`. A softmax head under the
// cross-entropy is accepted with a warning in ModelDef::fit_warnings.
absl::StatusOr<ModelDef> LoadTorchScriptModel(std::shared_ptr<const std::string> bytes,
                                              const std::string& file_name,
                                              const Dataset* fit_to = nullptr);

// A replica of a fitted model on the CPU: its parameters are views into
// host_parameters (shared read-only by the node's replicas, as CpuReplica's are), its
// gradients views into its own flat gradient buffer.
absl::StatusOr<std::unique_ptr<Replica>> CreateTorchScriptReplica(const ModelDef& model,
                                                                  const float* host_parameters);

// LibTorch intra-op threads of every replica thread in this process, and OpenBLAS's
// threads (its matrix products), both at least 1.
void SetTorchThreads(int threads);

// Writes `model` holding `values` (num_parameters floats: parameters, then buffers) as
// a TorchScript file at `path` that torch.jit.load reads: the uploaded module with
// the trained values (TorchScript models), or a module generated from the layers
// with the same parameter names (native models). The module is saved in eval mode.
// Written to a temporary file in the same directory, then renamed.
absl::Status ExportTorchScript(const ModelDef& model, const float* values, const std::string& path);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_TORCHSCRIPT_H_
