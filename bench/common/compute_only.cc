#include "bench/common/compute_only.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/counter_rng.h"
#include "worker/engine/replica_factory.h"

namespace tributary::bench {

absl::StatusOr<ComputeOnly> MeasureComputeOnly(const engine::ModelDef& model,
                                               const std::string& device, int batch,
                                               double min_seconds) {
  if (device != "cpu" && device != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("compute-only device must be cpu or gpu, got \"", device, "\""));
  }
  if (batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("compute-only batch must be > 0, got ", batch));
  }
  std::vector<float> params(model.num_parameters);
  engine::InitParameters(model, 1, params.data());
  const engine::DeviceSpec spec{
      device == "gpu" ? engine::DeviceSpec::Kind::kGpu : engine::DeviceSpec::Kind::kCpu, 0};
  absl::StatusOr<std::unique_ptr<engine::Replica>> replica =
      engine::CreateReplica(model, spec, params.data());
  if (!replica.ok()) return replica.status();
  engine::CounterRng rng(7, 1);
  std::vector<float> features(static_cast<size_t>(batch) * model.input.size());
  for (float& f : features) f = static_cast<float>(rng.NextDouble());
  std::vector<int32_t> labels(batch);
  std::vector<uint64_t> ids(batch);
  for (int i = 0; i < batch; ++i) {
    labels[i] = static_cast<int32_t>(rng.NextBelow(model.num_classes));
    ids[i] = static_cast<uint64_t>(i);
  }
  engine::Batch samples;
  samples.features = features.data();
  samples.labels = labels.data();
  samples.sample_ids = ids.data();
  samples.count = batch;
  absl::Status failed;
  const double seconds = TimePerCall(
      [&] {
        if (!failed.ok()) return;
        absl::StatusOr<engine::LossStats> loss =
            (*replica)->ForwardBackward(samples, {1, 0}, nullptr);
        if (!loss.ok()) failed = loss.status();
      },
      min_seconds);
  if (!failed.ok()) return failed;
  return ComputeOnly{(*replica)->device(), batch, batch / seconds};
}

}  // namespace tributary::bench
