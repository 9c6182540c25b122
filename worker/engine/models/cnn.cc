// cnn: two 3x3 convolutions (padding 1), each followed by ReLU and 2x2 max-pooling,
// then a fully connected head: Linear -> ReLU (-> Dropout) per hidden size and a
// Linear to the classes. conv_channels = [c1, c2], layer_sizes = [hidden..., classes],
// input_shape = [channels, height, width]; the defaults fit Fashion-MNIST.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/model_registry.h"

namespace tributary::engine {
namespace {

absl::StatusOr<ModelDef> BuildCnn(const v1::ModelSpec& spec) {
  if (spec.conv_channels_size() != 2 || spec.input_shape_size() != 3 ||
      spec.layer_sizes_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: cnn needs conv_channels [c1,c2], input_shape [c,h,w] and layer_sizes "
                     "[hidden...,classes], got conv_channels [",
                     absl::StrJoin(spec.conv_channels(), ","), "], input_shape [",
                     absl::StrJoin(spec.input_shape(), ","), "], layer_sizes [",
                     absl::StrJoin(spec.layer_sizes(), ","), "]"));
  }
  ModelBuilder builder("cnn", Shape{spec.input_shape(0), spec.input_shape(1), spec.input_shape(2)});
  builder.Conv2d("conv1", spec.conv_channels(0), 3, 1, 1).Relu().MaxPool2d(2);
  builder.Conv2d("conv2", spec.conv_channels(1), 3, 1, 1).Relu().MaxPool2d(2);
  builder.Flatten();
  const auto& sizes = spec.layer_sizes();
  for (int i = 0; i < sizes.size(); ++i) {
    builder.Linear(absl::StrCat("fc", i + 1), sizes[i]);
    if (i + 1 < sizes.size()) builder.Relu().Dropout(spec.dropout());
  }
  return std::move(builder).Build();
}

}  // namespace

TRIBUTARY_REGISTER_MODEL("cnn", BuildCnn);

}  // namespace tributary::engine
