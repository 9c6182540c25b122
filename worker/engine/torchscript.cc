// Over 600 lines on purpose: every file that includes LibTorch's headers adds tens of
// seconds of compile time on the 2-core CI machine, so the engine stays one file.
// The TorchScript engine over LibTorch (built only when @local_torch found it;
// torchscript_absent.cc stands in otherwise). See torchscript.h for the contract.
#include "worker/engine/torchscript.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/script.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace tributary::engine {
namespace {

// LibTorch errors carry a C++ backtrace after the first lines; keep the message. An
// error inside a TorchScript module comes as two tracebacks and then the error itself
// ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."): keep that line and
// where in the user's own code it happened.
std::string TorchMessage(const std::exception& e) {
  const std::vector<std::string> lines = absl::StrSplit(std::string(e.what()), '\n');
  std::string error, where;
  bool original = false;
  for (const std::string& line : lines) {
    if (line.rfind("Traceback of TorchScript, original code", 0) == 0) original = true;
    if (original && where.empty() && line.rfind("  File ", 0) == 0) where = line.substr(2);
    const size_t colon = line.find("Error: ");
    if (colon != std::string::npos && colon > 0 && line.find(' ') > colon) error = line;
  }
  if (!error.empty()) return where.empty() ? error : absl::StrCat(error, " (", where, ")");
  std::vector<std::string> kept;
  for (const std::string& line : lines) {
    if (line.rfind("Exception raised from", 0) == 0 || line.rfind("frame #", 0) == 0) break;
    if (!line.empty()) kept.push_back(line);
    if (kept.size() >= 6) break;
  }
  return absl::StrJoin(kept, " | ");
}

std::string DimsText(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string DimsText(c10::IntArrayRef dims) {
  return DimsText(std::vector<int64_t>(dims.begin(), dims.end()));
}

absl::StatusOr<torch::jit::Module> LoadModule(const ModelDef& model) {
  const TorchScriptSource& source = *model.torchscript;
  try {
    std::istringstream in(*source.bytes);
    return torch::jit::load(in, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", source.file_name, ": not a TorchScript module LibTorch ", TORCH_VERSION,
        " can load (save it with torch.jit.script(model).save(path)): ", TorchMessage(e)));
  }
}

// The module's tensors in flat-buffer order: trainable parameters, then buffers and
// frozen parameters. `is_buffer[i]` tells which.
struct ModuleTensors {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  std::vector<bool> is_buffer;
};

ModuleTensors CollectTensors(const torch::jit::Module& module) {
  ModuleTensors out;
  std::vector<std::pair<std::string, at::Tensor>> frozen;
  // Empty tensors have nothing to train or carry: they stay out of the layout.
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value.numel() == 0) continue;
    if (p.value.requires_grad()) {
      out.names.push_back(p.name);
      out.tensors.push_back(p.value);
      out.is_buffer.push_back(false);
    } else {
      frozen.emplace_back(p.name, p.value);
    }
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    if (b.value.numel() == 0) continue;
    out.names.push_back(b.name);
    out.tensors.push_back(b.value);
    out.is_buffer.push_back(true);
  }
  for (auto& f : frozen) {
    out.names.push_back(f.first);
    out.tensors.push_back(f.second);
    out.is_buffer.push_back(true);
  }
  return out;
}

bool FloatValued(c10::ScalarType type) {
  return c10::isFloatingType(type) || c10::isIntegralType(type, /*includeBool=*/true);
}

// Copies a module tensor's values into float slots, whatever its dtype.
void TensorToFloats(const at::Tensor& tensor, float* out) {
  at::Tensor dst = torch::from_blob(out, tensor.sizes(), torch::kFloat32);
  torch::NoGradGuard no_grad;
  dst.copy_(tensor);
}

// Writes float slots into a module tensor (converted to its dtype).
void FloatsToTensor(const float* in, at::Tensor& tensor) {
  at::Tensor src = torch::from_blob(const_cast<float*>(in), tensor.sizes(), torch::kFloat32);
  torch::NoGradGuard no_grad;
  tensor.copy_(src);
}

// Runs forward on `count` samples in eval mode; checks the output.
absl::StatusOr<at::Tensor> ProbeForward(torch::jit::Module& module, const ModelDef& model,
                                        const float* features, int64_t count,
                                        const std::vector<int64_t>& sample_dims) {
  const std::string& file = model.torchscript->file_name;
  std::vector<int64_t> input_dims = {count};
  input_dims.insert(input_dims.end(), sample_dims.begin(), sample_dims.end());
  at::Tensor input = torch::from_blob(const_cast<float*>(features), input_dims, torch::kFloat32);
  c10::IValue output;
  try {
    torch::NoGradGuard no_grad;
    module.eval();
    output = module.forward({input});
    module.train();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", file,
                                                   ": forward fails on an input of shape ",
                                                   DimsText(input_dims), ": ", TorchMessage(e)));
  }
  if (!output.isTensor()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": forward returns ", output.tagKind(), " for an input of shape ",
        DimsText(input_dims), "; Tributary needs one tensor of class scores [N, classes]"));
  }
  at::Tensor logits = output.toTensor();
  if (logits.dim() != 2 || logits.size(0) != count || !c10::isFloatingType(logits.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("model file ", file, ": forward returns a ",
                     c10::toString(logits.scalar_type()), " tensor of shape ",
                     DimsText(logits.sizes()), " for an input of shape ", DimsText(input_dims),
                     "; Tributary needs float class scores of shape [", count, ", classes]"));
  }
  if (!torch::isfinite(logits).all().item<bool>()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": forward returns non-finite values (NaN or Inf) for the first ",
        count, " training samples"));
  }
  return logits;
}

// Reports a gradient as final to the replica when autograd has accumulated it.
class AccumulatedHook : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatedHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

class TorchScriptReplica : public Replica {
 public:
  TorchScriptReplica(const ModelDef& model, torch::jit::Module module, const float* host)
      : model_(model), module_(std::move(module)), host_(host), gradients_(model.num_parameters) {}

  absl::Status Init() {
    ModuleTensors tensors = CollectTensors(module_);
    if (tensors.tensors.size() != model_.tensors.size()) {
      return absl::InternalError(absl::StrCat("model file ", model_.torchscript->file_name,
                                              ": the module has ", tensors.tensors.size(),
                                              " tensors, its layout ", model_.tensors.size()));
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < tensors.tensors.size(); ++i) {
      const TensorInfo& info = model_.tensors[i];
      at::Tensor& t = tensors.tensors[i];
      if (info.buffer) {
        buffers_.push_back({t, info.offset});
        continue;
      }
      // The parameter reads the shared host buffer in place; its gradient accumulates
      // into this replica's flat gradient buffer.
      t.set_data(
          torch::from_blob(const_cast<float*>(host_) + info.offset, t.sizes(), torch::kFloat32));
      t.mutable_grad() =
          torch::from_blob(gradients_.data() + info.offset, t.sizes(), torch::kFloat32);
      std::shared_ptr<torch::autograd::Node> accumulator =
          torch::autograd::impl::grad_accumulator(t);
      const int index = static_cast<int>(params_.size());
      accumulator->add_post_hook(
          std::make_unique<AccumulatedHook>([this, index] { MarkReady(index); }));
      params_.push_back({t, info.offset, static_cast<int>(i)});
      accumulators_.push_back(std::move(accumulator));
    }
    ready_.assign(params_.size(), 0);
    return absl::OkStatus();
  }

  const ModelDef& model() const override { return model_; }
  std::string device() const override { return "cpu"; }

  absl::Status SetParameters(const float* host, int64_t offset, int64_t length) override {
    if (host != host_) {
      return absl::InvalidArgumentError(
          "TorchScript replica: SetParameters must name the shared host buffer");
    }
    return CheckRange("SetParameters", offset, length, model_.num_parameters);
  }

  absl::StatusOr<LossStats> ForwardBackward(const Batch& batch, const DropoutKey& key,
                                            const GradientReadyFn& on_ready) override {
    if (absl::Status valid = CheckBatch(model_, batch); !valid.ok()) return valid;
    if (parameters_needed_) parameters_needed_(0, model_.num_parameters);
    std::fill(gradients_.begin(), gradients_.end(), 0.0f);
    LoadBuffers();
    LossStats stats;
    stats.samples = batch.count;
    on_ready_ = &on_ready;
    next_ = static_cast<int>(params_.size());
    std::fill(ready_.begin(), ready_.end(), 0);
    if (batch.count > 0) {
      try {
        module_.train();
        // LibTorch's CPU generator draws the dropout masks; seeding it here would race
        // with the other replicas' threads, so masks are not reproducible (torchscript.h).
        at::Tensor logits = Forward(batch);
        if (absl::Status checked = CheckLogits(logits, batch.count); !checked.ok()) {
          on_ready_ = nullptr;
          return checked;
        }
        at::Tensor labels = Labels(batch);
        StoreBuffers(on_ready);
        at::Tensor loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum);
        stats.correct = (logits.argmax(1) == labels).sum().item<int64_t>();
        stats.loss_sum = loss.item<double>();
        loss.backward();
      } catch (const std::exception& e) {
        on_ready_ = nullptr;
        return absl::InternalError(absl::StrCat("model file ", model_.torchscript->file_name,
                                                ": training pass failed: ", TorchMessage(e)));
      }
    } else {
      StoreBuffers(on_ready);
    }
    // Parameters the pass did not reach have zero gradients: final as they are.
    for (int i = next_ - 1; i >= 0; --i) ready_[i] = 1;
    Advance();
    on_ready_ = nullptr;
    return stats;
  }

  absl::StatusOr<LossStats> Evaluate(const Batch& batch) override {
    if (absl::Status valid = CheckBatch(model_, batch); !valid.ok()) return valid;
    LossStats stats;
    stats.samples = batch.count;
    if (batch.count == 0) return stats;
    LoadBuffers();
    try {
      torch::NoGradGuard no_grad;
      module_.eval();
      at::Tensor logits = Forward(batch);
      module_.train();
      if (absl::Status checked = CheckLogits(logits, batch.count); !checked.ok()) return checked;
      at::Tensor labels = Labels(batch);
      stats.loss_sum =
          at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum).item<double>();
      stats.correct = (logits.argmax(1) == labels).sum().item<int64_t>();
    } catch (const std::exception& e) {
      module_.train();
      return absl::InternalError(absl::StrCat("model file ", model_.torchscript->file_name,
                                              ": evaluation failed: ", TorchMessage(e)));
    }
    return stats;
  }

  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override {
    if (absl::Status s = CheckRange("CopyGradients", offset, length, model_.num_parameters);
        !s.ok()) {
      return s;
    }
    std::copy(gradients_.begin() + offset, gradients_.begin() + offset + length, dst);
    return absl::OkStatus();
  }

  const float* host_gradients() const override { return gradients_.data(); }

 private:
  struct Param {
    at::Tensor tensor;
    int64_t offset;
    int tensor_index;  // Into model_.tensors.
  };
  struct Buffer {
    at::Tensor tensor;  // The module's own storage (the forward pass may update it).
    int64_t offset;
  };

  at::Tensor Forward(const Batch& batch) {
    std::vector<int64_t> dims = {batch.count};
    const std::vector<int64_t>& sample = model_.torchscript->sample_dims;
    dims.insert(dims.end(), sample.begin(), sample.end());
    at::Tensor input = torch::from_blob(const_cast<float*>(batch.features), dims, torch::kFloat32);
    return module_.forward({input}).toTensor();
  }

  static at::Tensor Labels(const Batch& batch) {
    return torch::from_blob(const_cast<int32_t*>(batch.labels), {batch.count}, torch::kInt32)
        .to(torch::kInt64);
  }

  absl::Status CheckLogits(const at::Tensor& logits, int64_t count) const {
    if (logits.dim() != 2 || logits.size(0) != count || logits.size(1) < model_.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("model file ", model_.torchscript->file_name, ": forward returned shape ",
                       DimsText(logits.sizes()), " for ", count, " samples; expected [", count,
                       ", ", model_.num_classes, "]"));
    }
    return absl::OkStatus();
  }

  // Every pass starts from the buffers in the shared flat buffer (rank 0's values).
  void LoadBuffers() {
    for (Buffer& b : buffers_) FloatsToTensor(host_ + b.offset, b.tensor);
  }

  // After the forward pass: the buffer source hands its updated buffers on through
  // the gradient slots; the others contribute zeros (already there).
  void StoreBuffers(const GradientReadyFn& on_ready) {
    if (buffer_source_) {
      for (Buffer& b : buffers_) TensorToFloats(b.tensor, gradients_.data() + b.offset);
    }
    if (!on_ready) return;
    for (size_t t = model_.tensors.size(); t-- > 0;) {
      const TensorInfo& info = model_.tensors[t];
      if (!info.buffer) break;
      on_ready(static_cast<int>(t), info.offset, info.length);
    }
  }

  // Autograd finished parameter `index`'s gradient (on this replica's thread).
  void MarkReady(int index) {
    if (on_ready_ == nullptr) return;
    ready_[index] = 1;
    Advance();
  }

  // Reports, highest offset first, every parameter whose gradient and every higher
  // one's are final: autograd's own order is close to but not exactly that.
  void Advance() {
    while (next_ > 0 && ready_[next_ - 1]) {
      --next_;
      const Param& p = params_[next_];
      if (*on_ready_) {
        (*on_ready_)(p.tensor_index, p.offset, model_.tensors[p.tensor_index].length);
      }
    }
  }

  const ModelDef model_;  // A copy: cheap (the file is shared), and outlives the caller's.
  torch::jit::Module module_;
  const float* host_;
  std::vector<float> gradients_;
  std::vector<Param> params_;  // Trainable parameters, ascending offset.
  std::vector<Buffer> buffers_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // Keep the hooks.
  std::vector<uint8_t> ready_;
  int next_ = 0;  // params_[next_, end) are reported.
  const GradientReadyFn* on_ready_ = nullptr;
};

// TorchScript source for a native model's layers (ExportTorchScript).
absl::StatusOr<std::string> NativeForwardSource(const ModelDef& model) {
  std::string code = "def forward(self, x):\n";
  const Shape& in = model.input;
  if (in.height > 1 || in.width > 1) {
    absl::StrAppend(&code, "    x = x.reshape([x.size(0), ", in.channels, ", ", in.height, ", ",
                    in.width, "])\n");
  } else {
    absl::StrAppend(&code, "    x = x.reshape([x.size(0), ", in.channels, "])\n");
  }
  for (const LayerSpec& l : model.layers) {
    const std::string w = absl::StrReplaceAll(l.name, {{".", "_"}}) + "_weight";
    const std::string b = absl::StrReplaceAll(l.name, {{".", "_"}}) + "_bias";
    switch (l.kind) {
      case LayerKind::kLinear:
        absl::StrAppend(&code, "    x = torch.addmm(self.", b, ", x.flatten(1), self.", w,
                        ".t())\n");
        break;
      case LayerKind::kConv2d:
        absl::StrAppend(&code, "    x = torch.conv2d(x, self.", w, ", self.", b, ", [", l.stride,
                        ", ", l.stride, "], [", l.padding, ", ", l.padding, "])\n");
        break;
      case LayerKind::kRelu:
        absl::StrAppend(&code, "    x = torch.relu(x)\n");
        break;
      case LayerKind::kTanh:
        absl::StrAppend(&code, "    x = torch.tanh(x)\n");
        break;
      case LayerKind::kMaxPool2d:
        absl::StrAppend(&code, "    x = torch.max_pool2d(x, [", l.kernel, ", ", l.kernel, "], [",
                        l.kernel, ", ", l.kernel, "])\n");
        break;
      case LayerKind::kFlatten:
        absl::StrAppend(&code, "    x = x.flatten(1)\n");
        break;
      case LayerKind::kDropout:
        break;  // Inference: dropout is the identity.
    }
  }
  absl::StrAppend(&code, "    return x\n");
  return code;
}

absl::Status SaveAtomically(torch::jit::Module& module, const std::string& path) {
  const std::string temporary = absl::StrCat(path, ".tmp-", getpid());
  try {
    module.save(temporary);
  } catch (const std::exception& e) {
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", TorchMessage(e)));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": rename: ", why));
  }
  return absl::OkStatus();
}

// Lays out the flat buffer from the module's tensors and keeps their values as the
// initial ones.
absl::Status Describe(const torch::jit::Module& module, ModelDef& model) {
  ModuleTensors tensors = CollectTensors(module);
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    const at::Tensor& t = tensors.tensors[i];
    const std::string& name = tensors.names[i];
    const std::string what = absl::StrCat("model file ", model.torchscript->file_name, ": ",
                                          tensors.is_buffer[i] ? "buffer " : "parameter ", name);
    if (!tensors.is_buffer[i] && t.scalar_type() != torch::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is ", c10::toString(t.scalar_type()),
          "; Tributary trains float32 parameters (call model.float() before torch.jit.script)"));
    }
    if (!FloatValued(t.scalar_type()) || t.is_sparse() || t.is_quantized()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is ", c10::toString(t.scalar_type()),
                       ": only dense floating, integer and bool tensors can travel as buffers"));
    }
    TensorInfo info;
    info.name = name;
    info.shape.assign(t.sizes().begin(), t.sizes().end());
    if (info.shape.empty()) info.shape.push_back(1);  // A scalar (num_batches_tracked).
    info.offset = offset;
    info.length = t.numel();
    info.buffer = tensors.is_buffer[i];
    info.fan_in = 0;
    offset += info.length;
    model.tensors.push_back(std::move(info));
  }
  model.num_parameters = offset;
  model.num_trained = offset;
  for (const TensorInfo& info : model.tensors) {
    if (info.buffer) {
      model.num_trained = info.offset;
      break;
    }
  }
  if (model.num_trained == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model file ", model.torchscript->file_name,
                     ": the module has no trainable parameter (nothing with requires_grad=True)"));
  }
  auto initial = std::make_shared<std::vector<float>>(model.num_parameters);
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    TensorToFloats(tensors.tensors[i], initial->data() + model.tensors[i].offset);
  }
  for (float v : *initial) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model file ", model.torchscript->file_name,
                       ": its initial parameters or buffers hold NaN or Inf"));
    }
  }
  model.initial_values = std::move(initial);
  return absl::OkStatus();
}

// Sets the input shape and the class count from an eval-mode pass over a few of the
// training samples (model.torchscript->sample_dims already holds the data's shape).
absl::Status Fit(torch::jit::Module& module, ModelDef& model, const Dataset& train) {
  const TorchScriptSource& source = *model.torchscript;
  model.input = train.sample_shape;
  const int64_t count = std::min<int64_t>(train.size(), 4);
  absl::StatusOr<at::Tensor> logits =
      ProbeForward(module, model, train.features.data(), count, source.sample_dims);
  if (!logits.ok()) return logits.status();
  const int64_t classes = logits->size(1);
  if (classes < 2 || classes < train.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", source.file_name, ": forward returns ", classes,
        " class scores per sample but dataset ", train.source, " has labels up to ",
        train.num_classes - 1, " (needs at least ", std::max<int64_t>(2, train.num_classes), ")"));
  }
  model.num_classes = classes;
  return absl::OkStatus();
}

}  // namespace

bool BuiltWithTorch() { return true; }

std::string TorchDescription() { return absl::StrCat("LibTorch ", TORCH_VERSION, " (CPU)"); }

absl::StatusOr<ModelDef> LoadTorchScriptModel(std::shared_ptr<const std::string> bytes,
                                              const std::string& file_name, const Dataset* fit_to) {
  if (fit_to != nullptr && fit_to->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset ", fit_to->source, ": no training samples"));
  }
  ModelDef model;
  model.name = absl::StrCat("torchscript:", file_name);
  auto source = std::make_shared<TorchScriptSource>();
  source->file_name = file_name;
  source->bytes = std::move(bytes);
  if (fit_to != nullptr) source->sample_dims = fit_to->SampleDims();
  model.torchscript = source;
  // Loaded once here, for the description and the probe pass alike.
  absl::StatusOr<torch::jit::Module> module = LoadModule(model);
  if (!module.ok()) return module.status();
  if (absl::Status described = Describe(*module, model); !described.ok()) return described;
  if (fit_to != nullptr) {
    if (absl::Status fitted = Fit(*module, model, *fit_to); !fitted.ok()) return fitted;
  }
  return model;
}

absl::StatusOr<std::unique_ptr<Replica>> CreateTorchScriptReplica(const ModelDef& model,
                                                                  const float* host_parameters) {
  if (model.torchscript == nullptr || model.num_classes == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", model.name, ": not a fitted TorchScript model"));
  }
  absl::StatusOr<torch::jit::Module> module = LoadModule(model);
  if (!module.ok()) return module.status();
  auto replica = std::make_unique<TorchScriptReplica>(model, *std::move(module), host_parameters);
  if (absl::Status ready = replica->Init(); !ready.ok()) return ready;
  return std::unique_ptr<Replica>(std::move(replica));
}

void SetTorchThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  // LibTorch's matrix products go to the system BLAS (OpenBLAS where installed), which
  // keeps a thread pool of its own sized to the machine.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

absl::Status ExportTorchScript(const ModelDef& model, const float* values,
                               const std::string& path) {
  if (model.torchscript != nullptr) {
    absl::StatusOr<torch::jit::Module> module = LoadModule(model);
    if (!module.ok()) return module.status();
    ModuleTensors tensors = CollectTensors(*module);
    if (tensors.tensors.size() != model.tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model file ", model.torchscript->file_name,
                       ": its tensors do not match the layout of the values to export"));
    }
    for (size_t i = 0; i < tensors.tensors.size(); ++i) {
      if (model.tensors[i].length != tensors.tensors[i].numel()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model file ", model.torchscript->file_name, ": tensor ",
                         model.tensors[i].name, " has ", tensors.tensors[i].numel(),
                         " elements, the layout ", model.tensors[i].length));
      }
      FloatsToTensor(values + model.tensors[i].offset, tensors.tensors[i]);
    }
    module->eval();
    return SaveAtomically(*module, path);
  }
  absl::StatusOr<std::string> code = NativeForwardSource(model);
  if (!code.ok()) return code.status();
  try {
    torch::jit::Module module(model.name.empty() ? "model" : model.name);
    for (const TensorInfo& info : model.tensors) {
      at::Tensor t =
          torch::from_blob(const_cast<float*>(values) + info.offset, info.shape, torch::kFloat32)
              .clone()
              .requires_grad_(true);
      module.register_parameter(absl::StrReplaceAll(info.name, {{".", "_"}}), t,
                                /*is_buffer=*/false);
    }
    module.define(*code);
    module.eval();
    return SaveAtomically(module, path);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(
        "model ", model.name, ": cannot build its TorchScript module: ", TorchMessage(e)));
  }
}

}  // namespace tributary::engine
