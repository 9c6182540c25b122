// logreg: multinomial logistic regression, one Linear layer [inputs, classes].
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/model_registry.h"

namespace tributary::engine {
namespace {

absl::StatusOr<ModelDef> BuildLogreg(const v1::ModelSpec& spec) {
  if (spec.layer_sizes_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layer_sizes: logreg needs [inputs, classes], got [",
                     absl::StrJoin(spec.layer_sizes(), ","), "]"));
  }
  ModelBuilder builder("logreg", Shape{spec.layer_sizes(0), 1, 1});
  builder.Linear("fc1", spec.layer_sizes(1));
  return std::move(builder).Build();
}

}  // namespace

TRIBUTARY_REGISTER_MODEL("logreg", BuildLogreg);

}  // namespace tributary::engine
