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
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/model_metrics.h"

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

// The model's input for `count` samples: [count, *sample_dims], float32 or int64 as
// the data is (a view of the batch's memory, no copy).
at::Tensor InputTensor(const TorchScriptSource& source, const float* features,
                       const int64_t* int_features, int64_t count) {
  std::vector<int64_t> dims = {count};
  dims.insert(dims.end(), source.sample_dims.begin(), source.sample_dims.end());
  if (source.input_type == FeatureType::kInt64) {
    return torch::from_blob(const_cast<int64_t*>(int_features), dims, torch::kInt64);
  }
  return torch::from_blob(const_cast<float*>(features), dims, torch::kFloat32);
}

// The targets of `count` samples as the model's loss gets them: class ids as int64
// [count], int64 [count, *target_dims] or float32 [count, *target_dims].
at::Tensor TargetTensor(const TorchScriptSource& source, const Batch& batch) {
  std::vector<int64_t> dims = {batch.count};
  switch (source.target_kind) {
    case TargetKind::kClassId:
      return torch::from_blob(const_cast<int32_t*>(batch.labels), dims, torch::kInt32)
          .to(torch::kInt64);
    case TargetKind::kInt64:
      dims.insert(dims.end(), source.target_dims.begin(), source.target_dims.end());
      return torch::from_blob(const_cast<int64_t*>(batch.int_targets), dims, torch::kInt64);
    case TargetKind::kFloat32:
      dims.insert(dims.end(), source.target_dims.begin(), source.target_dims.end());
      return torch::from_blob(const_cast<float*>(batch.float_targets), dims, torch::kFloat32);
  }
  return at::Tensor();
}

std::string TensorText(const at::Tensor& t) {
  return absl::StrCat(c10::toString(t.scalar_type()), " ", DimsText(t.sizes()));
}

// Checks what `loss(x, y)` returned for `count` samples: one floating tensor [count, ...]
// of finite values (when check_finite) holding `per_sample` elements per sample (0:
// any). Names the file, the method, what it got and what Tributary needs.
absl::StatusOr<at::Tensor> CheckLoss(const std::string& file, const c10::IValue& output,
                                     int64_t count, int64_t per_sample, bool check_finite) {
  auto bad = [&](const std::string& got) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": loss(x, y) returns ", got, " for ", count,
        " samples; Tributary needs one float tensor of per-sample losses, shape [", count,
        "] or [", count, ", ...] (e.g. one loss per token), not reduced: it sums them itself"));
  };
  if (!output.isTensor()) return bad(output.tagKind());
  at::Tensor loss = output.toTensor();
  if (loss.dim() < 1 || loss.size(0) != count || !c10::isFloatingType(loss.scalar_type())) {
    return bad(absl::StrCat("a ", TensorText(loss), " tensor"));
  }
  if (per_sample > 0 && loss.numel() != count * per_sample) {
    return bad(absl::StrCat("a ", TensorText(loss), " tensor (", per_sample,
                            " elements per sample before)"));
  }
  if (check_finite && !torch::isfinite(loss).all().item<bool>()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": loss(x, y) returns non-finite values (NaN or Inf) for the first ",
        count, " training samples"));
  }
  return loss;
}

// Adds what `metrics(x, y)` returned (a Dict[str, Tensor] of per-batch sums) into
// `sums`, checking names and values.
absl::Status AddMetrics(const std::string& file, const c10::IValue& output,
                        std::map<std::string, double>& sums) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": metrics(x, y) ", what,
        "; Tributary needs a Dict[str, Tensor] of at most ", kMaxModelMetrics,
        " scalars summed over the batch, ", MetricNameRule()));
  };
  if (!output.isGenericDict()) return bad(absl::StrCat("returns ", output.tagKind()));
  const c10::Dict<c10::IValue, c10::IValue> dict = output.toGenericDict();
  if (dict.size() > kMaxModelMetrics) return bad(absl::StrCat("returns ", dict.size(), " entries"));
  for (const auto& entry : dict) {
    if (!entry.key().isString()) return bad("has a key that is not a string");
    const std::string name = entry.key().toStringRef();
    if (!IsMetricName(name)) return bad(absl::StrCat("has a metric named '", name.substr(0, 80), "'"));
    if (!entry.value().isTensor() || entry.value().toTensor().numel() != 1) {
      return bad(absl::StrCat("returns ",
                              entry.value().isTensor() ? TensorText(entry.value().toTensor())
                                                       : std::string(entry.value().tagKind()),
                              " for '", name, "'"));
    }
    const double value = entry.value().toTensor().to(torch::kFloat64).item<double>();
    if (!std::isfinite(value)) return bad(absl::StrCat("returns ", value, " for '", name, "'"));
    sums[name] += value;
  }
  return absl::OkStatus();
}

// Runs forward on `count` samples in eval mode; checks the output.
absl::StatusOr<at::Tensor> ProbeForward(torch::jit::Module& module, const ModelDef& model,
                                        const at::Tensor& input) {
  const std::string& file = model.torchscript->file_name;
  const int64_t count = input.size(0);
  const std::string input_text = absl::StrCat("an input of ", TensorText(input));
  c10::IValue output;
  try {
    torch::NoGradGuard no_grad;
    module.eval();
    output = module.forward({input});
    module.train();
  } catch (const std::exception& e) {
    module.train();
    return absl::InvalidArgumentError(absl::StrCat("model file ", file, ": forward fails on ",
                                                   input_text, ": ", TorchMessage(e)));
  }
  if (!output.isTensor()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": forward returns ", output.tagKind(), " for ", input_text,
        "; Tributary needs one tensor of class scores [N, classes] (or a loss(x, y) method)"));
  }
  at::Tensor logits = output.toTensor();
  if (logits.dim() != 2 || logits.size(0) != count || !c10::isFloatingType(logits.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": forward returns a ", TensorText(logits), " tensor for ",
        input_text, "; Tributary needs float class scores of shape [", count,
        ", classes] (or a loss(x, y) method)"));
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
    stats.classified = !source().has_loss;
    on_ready_ = &on_ready;
    next_ = static_cast<int>(params_.size());
    std::fill(ready_.begin(), ready_.end(), 0);
    if (batch.count > 0) {
      try {
        module_.train();
        // LibTorch's CPU generator draws the dropout masks; seeding it here would race
        // with the other replicas' threads, so masks are not reproducible (torchscript.h).
        absl::StatusOr<at::Tensor> loss = Losses(batch, stats);
        if (!loss.ok()) {
          on_ready_ = nullptr;
          return loss.status();
        }
        StoreBuffers(on_ready);
        // The SUM of every element: gradients of a split batch add up exactly; the PS
        // divides by the global batch's element count.
        at::Tensor total = loss->sum();
        stats.loss_sum = total.item<double>();
        total.backward();
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
    stats.classified = !source().has_loss;
    if (batch.count == 0) return stats;
    LoadBuffers();
    try {
      torch::NoGradGuard no_grad;
      module_.eval();
      absl::StatusOr<at::Tensor> loss = Losses(batch, stats);
      if (loss.ok() && source().has_metrics) {
        const c10::IValue metrics =
            module_.get_method("metrics")({Input(batch), TargetTensor(source(), batch)});
        if (absl::Status added = AddMetrics(source().file_name, metrics, stats.metrics);
            !added.ok()) {
          loss = added;
        }
      }
      module_.train();
      if (!loss.ok()) return loss.status();
      stats.loss_sum = loss->sum().item<double>();
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

  const TorchScriptSource& source() const { return *model_.torchscript; }

  at::Tensor Input(const Batch& batch) const {
    return InputTensor(source(), batch.features, batch.int_features, batch.count);
  }

  // The batch's losses, one element each (the module's own `loss`, or the cross-entropy
  // of forward's class scores, which also counts the correct samples into `stats`).
  // Sets stats.loss_elements. Torch errors are thrown to the caller.
  absl::StatusOr<at::Tensor> Losses(const Batch& batch, LossStats& stats) {
    if (source().has_loss) {
      const c10::IValue output =
          module_.get_method("loss")({Input(batch), TargetTensor(source(), batch)});
      absl::StatusOr<at::Tensor> loss =
          CheckLoss(source().file_name, output, batch.count, model_.loss_elements_per_sample,
                    /*check_finite=*/false);
      if (loss.ok()) stats.loss_elements = loss->numel();
      return loss;
    }
    at::Tensor logits = module_.forward({Input(batch)}).toTensor();
    if (logits.dim() != 2 || logits.size(0) != batch.count ||
        logits.size(1) < model_.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model file ", source().file_name, ": forward returned shape ",
          DimsText(logits.sizes()), " for ", batch.count, " samples; expected [", batch.count,
          ", ", model_.num_classes, "]"));
    }
    at::Tensor labels = TargetTensor(source(), batch);
    stats.correct = (logits.argmax(1) == labels).sum().item<int64_t>();
    stats.loss_elements = batch.count;
    return at::cross_entropy_loss(logits, labels, {}, at::Reduction::None);
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

// Rows that are all >= 0 and sum to 1: what a softmax (or sigmoid-normalised) head
// gives, which the cross-entropy would apply a second softmax to.
bool LooksLikeProbabilities(const at::Tensor& scores) {
  if (scores.size(1) < 2) return false;
  torch::NoGradGuard no_grad;
  const at::Tensor rows = scores.to(torch::kFloat64);
  return (rows >= 0).all().item<bool>() &&
         ((rows.sum(1) - 1).abs() < 1e-4).all().item<bool>();
}

// Fits the model to the data: input shape and dtype, targets, and from a pass over the
// first few training samples (eval mode) either the class count (no `loss`) or the loss's
// elements per sample; `metrics` is run and checked too.
absl::Status Fit(torch::jit::Module& module, ModelDef& model, TorchScriptSource& source,
                 const Dataset& train) {
  const std::string& file = source.file_name;
  model.input = train.sample_shape;
  source.has_loss = module.find_method("loss").has_value();
  source.has_metrics = module.find_method("metrics").has_value();
  if (!source.has_loss && train.target_kind != TargetKind::kClassId) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file, ": has no loss(x, y) method, and dataset ", train.source, " has ",
        train.KindText(), "; without one Tributary trains class scores against class ids "
        "(integer labels of shape [samples]). Add `@torch.jit.export def loss(self, x, y) -> "
        "Tensor` returning one loss per sample (or per token), not reduced"));
  }
  const int64_t count = std::min<int64_t>(train.size(), 4);
  std::vector<uint64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[i] = static_cast<uint64_t>(i);
  BatchBuffer buffer;
  train.Gather(ids.data(), count, buffer);
  const Batch batch = buffer.View();
  const at::Tensor input = InputTensor(source, batch.features, batch.int_features, count);
  if (!source.has_loss) {
    absl::StatusOr<at::Tensor> logits = ProbeForward(module, model, input);
    if (!logits.ok()) return logits.status();
    const int64_t classes = logits->size(1);
    if (classes < 2 || classes < train.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model file ", file, ": forward returns ", classes,
          " class scores per sample but dataset ", train.source, " has labels up to ",
          train.num_classes - 1, " (needs at least ", std::max<int64_t>(2, train.num_classes),
          ")"));
    }
    model.num_classes = classes;
    if (LooksLikeProbabilities(*logits)) {
      model.fit_warnings.push_back(absl::StrCat(
          "model file ", file, ": forward's rows are all >= 0 and sum to 1, as a softmax "
          "gives; Tributary applies the cross-entropy to raw scores (logits), which softmaxes "
          "them again and trains worse. Return the scores before the softmax (or define "
          "loss(x, y) yourself)"));
    }
  } else {
    model.num_classes = train.num_classes;
    const at::Tensor targets = TargetTensor(source, batch);
    c10::IValue output;
    try {
      torch::NoGradGuard no_grad;
      module.eval();
      output = module.get_method("loss")({input, targets});
      module.train();
    } catch (const std::exception& e) {
      module.train();
      return absl::InvalidArgumentError(absl::StrCat(
          "model file ", file, ": loss(x, y) fails on x of ", TensorText(input), " and y of ",
          TensorText(targets), " (dataset ", train.source, "): ", TorchMessage(e)));
    }
    absl::StatusOr<at::Tensor> loss = CheckLoss(file, output, count, 0, /*check_finite=*/true);
    if (!loss.ok()) return loss.status();
    model.loss_elements_per_sample = loss->numel() / count;
  }
  if (source.has_metrics) {
    std::map<std::string, double> sums;
    try {
      torch::NoGradGuard no_grad;
      module.eval();
      const c10::IValue output =
          module.get_method("metrics")({input, TargetTensor(source, batch)});
      module.train();
      if (absl::Status added = AddMetrics(file, output, sums); !added.ok()) return added;
    } catch (const std::exception& e) {
      module.train();
      return absl::InvalidArgumentError(absl::StrCat("model file ", file,
                                                     ": metrics(x, y) fails on x of ",
                                                     TensorText(input), ": ", TorchMessage(e)));
    }
    for (const auto& [name, value] : sums) model.metric_names.push_back(name);
  }
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
  if (fit_to != nullptr) {
    source->sample_dims = fit_to->SampleDims();
    source->input_type = fit_to->feature_type;
    source->target_kind = fit_to->target_kind;
    source->target_dims = fit_to->target_dims;
  }
  model.torchscript = source;
  // Loaded once here, for the description and the probe pass alike.
  absl::StatusOr<torch::jit::Module> module = LoadModule(model);
  if (!module.ok()) return module.status();
  if (absl::Status described = Describe(*module, model); !described.ok()) return described;
  if (fit_to != nullptr) {
    if (absl::Status fitted = Fit(*module, model, *source, *fit_to); !fitted.ok()) return fitted;
  }
  return model;
}

absl::StatusOr<std::unique_ptr<Replica>> CreateTorchScriptReplica(const ModelDef& model,
                                                                  const float* host_parameters) {
  if (model.torchscript == nullptr || model.input.size() == 0) {
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
