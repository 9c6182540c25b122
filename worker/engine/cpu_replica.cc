#include "worker/engine/cpu_replica.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tributary::engine {

CpuReplica::CpuReplica(ModelDef model, const float* shared_parameters)
    : executor_(std::move(model)),
      parameters_(shared_parameters),
      own_gradients_(executor_.model().num_parameters, 0.0f),
      gradients_(own_gradients_.data()) {}

bool CpuReplica::UseGradientBuffer(float* buffer) {
  if (buffer == nullptr) return false;
  if (buffer != gradients_) {
    std::memmove(buffer, gradients_, executor_.model().num_parameters * sizeof(float));
  }
  gradients_ = buffer;
  std::vector<float>().swap(own_gradients_);
  return true;
}

absl::Status CpuReplica::SetParameters(const float* host, int64_t offset, int64_t length) {
  if (absl::Status range =
          CheckRange("cpu replica parameters", offset, length, model().num_parameters);
      !range.ok()) {
    return range;
  }
  if (host != parameters_) {
    return absl::FailedPreconditionError(
        "cpu replica: reads its shared parameter buffer in place; SetParameters must be "
        "given that buffer (update it, then call SetParameters with it)");
  }
  return absl::OkStatus();
}

absl::StatusOr<LossStats> CpuReplica::ForwardBackward(const Batch& batch, const DropoutKey& key,
                                                      const GradientReadyFn& on_ready) {
  if (absl::Status status = CheckBatch(model(), batch); !status.ok()) return status;
  return executor_.ForwardBackward(parameters_, batch, &key, gradients_, on_ready,
                                   parameters_needed_);
}

absl::StatusOr<LossStats> CpuReplica::Evaluate(const Batch& batch) {
  if (absl::Status status = CheckBatch(model(), batch); !status.ok()) return status;
  return executor_.Forward(parameters_, batch);
}

absl::Status CpuReplica::CopyGradients(int64_t offset, int64_t length, float* dst) {
  if (absl::Status range =
          CheckRange("cpu replica gradients", offset, length, model().num_parameters);
      !range.ok()) {
    return range;
  }
  std::copy(gradients_ + offset, gradients_ + offset + length, dst);
  return absl::OkStatus();
}

}  // namespace tributary::engine
