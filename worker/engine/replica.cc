#include "worker/engine/replica.h"

#include "absl/strings/str_cat.h"

namespace tributary::engine {

absl::Status CheckBatch(const ModelDef& model, const Batch& batch) {
  if (batch.count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch: count must be >= 0, got ", batch.count));
  }
  if (batch.count == 0) return absl::OkStatus();
  if (batch.features == nullptr || batch.labels == nullptr || batch.sample_ids == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch of ", batch.count, " samples: features, labels and sample_ids must be set"));
  }
  for (int64_t i = 0; i < batch.count; ++i) {
    if (batch.labels[i] < 0 || batch.labels[i] >= model.num_classes) {
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
