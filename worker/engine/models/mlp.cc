// mlp: Linear -> ReLU (-> Dropout) for each hidden size, then a Linear to the
// classes. layer_sizes = [inputs, hidden..., classes], e.g. [784, 256, 128, 10].
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/model_registry.h"

namespace tributary::engine {
namespace {

absl::StatusOr<ModelDef> BuildMlp(const v1::ModelSpec& spec) {
  const auto& sizes = spec.layer_sizes();
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layer_sizes: mlp needs [inputs, hidden..., classes], got [",
                     absl::StrJoin(sizes, ","), "]"));
  }
  ModelBuilder builder("mlp", Shape{sizes[0], 1, 1});
  for (int i = 1; i < sizes.size(); ++i) {
    builder.Linear(absl::StrCat("fc", i), sizes[i]);
    if (i + 1 < sizes.size()) builder.Relu().Dropout(spec.dropout());
  }
  return std::move(builder).Build();
}

}  // namespace

TRIBUTARY_REGISTER_MODEL("mlp", BuildMlp);

}  // namespace tributary::engine
