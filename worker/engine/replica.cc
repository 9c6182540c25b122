#include "worker/engine/replica.h"

#include "absl/strings/str_cat.h"

namespace tributary::engine {

absl::Status CheckBatch(const ModelDef& model, const Batch& batch) {
  if (batch.count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch: count must be >= 0, got ", batch.count));
  }
  if (batch.count == 0) return absl::OkStatus();
  const TorchScriptSource* source = model.torchscript.get();
  const bool int_input = source != nullptr && source->input_type == FeatureType::kInt64;
  const TargetKind targets = source != nullptr ? source->target_kind : TargetKind::kClassId;
  const bool inputs_set = int_input ? batch.int_features != nullptr : batch.features != nullptr;
  const bool targets_set = targets == TargetKind::kClassId  ? batch.labels != nullptr
                           : targets == TargetKind::kInt64 ? batch.int_targets != nullptr
                                                            : batch.float_targets != nullptr;
  if (!inputs_set || !targets_set || batch.sample_ids == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch of ", batch.count, " samples for model ", model.name, ": needs ",
        int_input ? "int64" : "float32", " features, ", TargetKindName(targets),
        " targets and sample_ids"));
  }
  if (targets != TargetKind::kClassId) return absl::OkStatus();
  // A model with its own loss judges its labels itself; the cross-entropy needs them
  // to be among its classes.
  const bool own_loss = source != nullptr && source->has_loss;
  for (int64_t i = 0; i < batch.count; ++i) {
    if (batch.labels[i] < 0 || (!own_loss && batch.labels[i] >= model.num_classes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch sample ", i, " (dataset sample ", batch.sample_ids[i], "): label ",
          batch.labels[i], " outside [0, ", model.num_classes, ") of model ", model.name));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRange(const char* what, int64_t offset, int64_t length, int64_t total) {
  if (offset < 0 || length < 0 || offset + length > total) {
    return absl::OutOfRangeError(absl::StrCat(what, ": range [", offset, ", ", offset + length,
                                              ") outside the buffer of ", total, " elements"));
  }
  return absl::OkStatus();
}

}  // namespace tributary::engine
