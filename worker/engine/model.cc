#include "worker/engine/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/counter_rng.h"

namespace tributary::engine {
namespace {

std::string ShapeString(const Shape& s) {
  if (s.height == 1 && s.width == 1) return absl::StrCat("[", s.channels, "]");
  return absl::StrCat("[", s.channels, ",", s.height, ",", s.width, "]");
}

}  // namespace

const char* FeatureTypeName(FeatureType type) {
  return type == FeatureType::kInt64 ? "int64" : "float32";
}

const char* TargetKindName(TargetKind kind) {
  switch (kind) {
    case TargetKind::kClassId:
      return "class ids";
    case TargetKind::kInt64:
      return "int64";
    case TargetKind::kFloat32:
      return "float32";
  }
  return "?";
}

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLinear:
      return "Linear";
    case LayerKind::kRelu:
      return "ReLU";
    case LayerKind::kTanh:
      return "Tanh";
    case LayerKind::kConv2d:
      return "Conv2d";
    case LayerKind::kMaxPool2d:
      return "MaxPool2d";
    case LayerKind::kFlatten:
      return "Flatten";
    case LayerKind::kDropout:
      return "Dropout";
  }
  return "?";
}

v1::ParameterLayout ModelDef::Layout() const {
  v1::ParameterLayout layout;
  for (const TensorInfo& tensor : tensors) {
    v1::TensorView* view = layout.add_tensors();
    view->set_name(tensor.name);
    for (int64_t dim : tensor.shape) view->add_shape(dim);
    view->set_offset(tensor.offset);
    view->set_length(tensor.length);
    if (tensor.buffer) view->set_buffer(true);
  }
  layout.set_total_elements(num_parameters);
  return layout;
}

int ModelDef::TensorAt(int64_t offset) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offset >= tensors[i].offset && offset < tensors[i].offset + tensors[i].length) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int64_t ModelDef::ForwardMacsPerSample() const {
  int64_t macs = 0;
  for (const LayerSpec& layer : layers) {
    if (layer.kind == LayerKind::kLinear) macs += layer.in.size() * layer.out.size();
    if (layer.kind == LayerKind::kConv2d) {
      macs += layer.out.size() * layer.in.channels * layer.kernel * layer.kernel;
    }
  }
  return macs;
}

void InitParameters(const ModelDef& model, uint64_t seed, float* params) {
  if (model.initial_values != nullptr) {
    std::copy(model.initial_values->begin(), model.initial_values->end(), params);
    return;
  }
  const uint64_t base = HashCombine(seed, kInitStream);
  for (const TensorInfo& tensor : model.tensors) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(tensor.fan_in));
    for (int64_t i = 0; i < tensor.length; ++i) {
      const int64_t index = tensor.offset + i;
      const double u = UnitInterval(HashCombine(base, static_cast<uint64_t>(index)));
      params[index] = static_cast<float>(bound * (2.0 * u - 1.0));
    }
  }
}

ModelBuilder::ModelBuilder(std::string model_name, Shape input) : current_(input) {
  model_.name = std::move(model_name);
  model_.input = input;
  if (input.channels <= 0 || input.height <= 0 || input.width <= 0) {
    error_ = absl::InvalidArgumentError(absl::StrCat(
        "model ", model_.name, ": input shape must be positive, got ", ShapeString(input)));
  }
}

LayerSpec& ModelBuilder::Add(LayerKind kind, std::string name, Shape out) {
  LayerSpec layer{kind};
  layer.name = std::move(name);
  layer.in = current_;
  layer.out = out;
  model_.layers.push_back(layer);
  current_ = out;
  return model_.layers.back();
}

TensorRange ModelBuilder::AddTensor(const std::string& name, std::vector<int64_t> shape,
                                    int64_t fan_in) {
  TensorInfo tensor;
  tensor.name = name;
  tensor.length = 1;
  for (int64_t dim : shape) tensor.length *= dim;
  tensor.shape = std::move(shape);
  tensor.offset = model_.num_parameters;
  tensor.fan_in = fan_in;
  tensor.layer = static_cast<int>(model_.layers.size()) - 1;
  model_.num_parameters += tensor.length;
  model_.tensors.push_back(tensor);
  return TensorRange{tensor.offset, tensor.length};
}

ModelBuilder& ModelBuilder::Linear(const std::string& name, int64_t outputs) {
  if (!error_.ok()) return *this;
  if (current_.height != 1 || current_.width != 1) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("model ", model_.name, ": Linear '", name, "' needs a flat input, got ",
                     ShapeString(current_), " (add Flatten() before it)"));
    return *this;
  }
  if (outputs <= 0) {
    error_ = absl::InvalidArgumentError(absl::StrCat("model ", model_.name, ": Linear '", name,
                                                     "' needs outputs > 0, got ", outputs));
    return *this;
  }
  const int64_t inputs = current_.channels;
  LayerSpec& layer = Add(LayerKind::kLinear, name, Shape{outputs, 1, 1});
  layer.weight = AddTensor(name + ".weight", {outputs, inputs}, inputs);
  model_.layers.back().bias = AddTensor(name + ".bias", {outputs}, inputs);
  return *this;
}

ModelBuilder& ModelBuilder::Conv2d(const std::string& name, int64_t out_channels, int kernel,
                                   int stride, int padding) {
  if (!error_.ok()) return *this;
  const int64_t out_h = (current_.height + 2 * padding - kernel) / stride + 1;
  const int64_t out_w = (current_.width + 2 * padding - kernel) / stride + 1;
  if (out_channels <= 0 || kernel <= 0 || stride <= 0 || padding < 0 || padding >= kernel ||
      current_.height + 2 * padding < kernel || current_.width + 2 * padding < kernel) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("model ", model_.name, ": Conv2d '", name, "' with ", out_channels,
                     " channels, kernel ", kernel, ", stride ", stride, ", padding ", padding,
                     " does not fit input ", ShapeString(current_)));
    return *this;
  }
  const int64_t in_channels = current_.channels;
  const int64_t fan_in = in_channels * kernel * kernel;
  LayerSpec& layer = Add(LayerKind::kConv2d, name, Shape{out_channels, out_h, out_w});
  layer.kernel = kernel;
  layer.stride = stride;
  layer.padding = padding;
  TensorRange weight =
      AddTensor(name + ".weight", {out_channels, in_channels, kernel, kernel}, fan_in);
  model_.layers.back().weight = weight;
  model_.layers.back().bias = AddTensor(name + ".bias", {out_channels}, fan_in);
  return *this;
}

ModelBuilder& ModelBuilder::MaxPool2d(int kernel) {
  if (!error_.ok()) return *this;
  if (kernel <= 0 || current_.height < kernel || current_.width < kernel) {
    error_ =
        absl::InvalidArgumentError(absl::StrCat("model ", model_.name, ": MaxPool2d(", kernel,
                                                ") does not fit input ", ShapeString(current_)));
    return *this;
  }
  LayerSpec& layer =
      Add(LayerKind::kMaxPool2d, absl::StrCat("pool", model_.layers.size() + 1),
          Shape{current_.channels, current_.height / kernel, current_.width / kernel});
  layer.kernel = kernel;
  layer.stride = kernel;
  return *this;
}

ModelBuilder& ModelBuilder::Relu() {
  if (error_.ok()) Add(LayerKind::kRelu, absl::StrCat("relu", model_.layers.size() + 1), current_);
  return *this;
}

ModelBuilder& ModelBuilder::Tanh() {
  if (error_.ok()) Add(LayerKind::kTanh, absl::StrCat("tanh", model_.layers.size() + 1), current_);
  return *this;
}

ModelBuilder& ModelBuilder::Flatten() {
  if (error_.ok()) {
    Add(LayerKind::kFlatten, absl::StrCat("flatten", model_.layers.size() + 1),
        Shape{current_.size(), 1, 1});
  }
  return *this;
}

ModelBuilder& ModelBuilder::Dropout(float p) {
  if (!error_.ok() || p == 0) return *this;
  if (!(p > 0 && p < 1)) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("model ", model_.name, ": dropout must be in [0, 1), got ", p));
    return *this;
  }
  LayerSpec& layer =
      Add(LayerKind::kDropout, absl::StrCat("dropout", model_.layers.size() + 1), current_);
  layer.dropout = p;
  layer.dropout_index = dropout_layers_++;
  return *this;
}

absl::StatusOr<ModelDef> ModelBuilder::Build() && {
  if (!error_.ok()) return error_;
  if (model_.layers.empty() || model_.num_parameters == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model_.name, ": has no layers with parameters"));
  }
  if (current_.height != 1 || current_.width != 1 || current_.channels < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model_.name,
                     ": the last layer must give a flat vector of >= 2 "
                     "class scores, got ",
                     ShapeString(current_)));
  }
  model_.num_classes = current_.channels;
  model_.num_trained = model_.num_parameters;
  return std::move(model_);
}

}  // namespace tributary::engine
