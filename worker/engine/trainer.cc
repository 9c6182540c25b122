#include "worker/engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/usable_cores.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/job_model.h"
#include "worker/engine/torchscript.h"

namespace tributary::engine {

void MeanGradient(const float* sum, int64_t n, uint64_t samples, float* mean) {
  const float count = static_cast<float>(samples);
  for (int64_t j = 0; j < n; ++j) mean[j] = sum[j] / count;
}

absl::Status CheckModelFitsData(const ModelDef& model, const Dataset& data) {
  if (model.torchscript == nullptr &&
      (data.feature_type != FeatureType::kFloat32 || data.target_kind != TargetKind::kClassId)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model.name, " takes float32 features and class ids but dataset ", data.source,
        " has ", data.KindText(),
        "; integer NPY features are passed on as int64 ids, never scaled (save "
        "x.astype(np.float32) / 255 for pixels), and other targets need a TorchScript model "
        "with its own loss(x, y)"));
  }
  if (data.feature_size() != model.input.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model.name, " takes ", model.input.size(), " inputs but dataset ",
                     data.source, " has ", data.feature_size(), " features per sample"));
  }
  if (model.torchscript != nullptr && model.torchscript->has_loss) return absl::OkStatus();
  if (data.num_classes > model.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("model ", model.name, " has ", model.num_classes,
                                                   " classes but dataset ", data.source,
                                                   " has labels up to ", data.num_classes - 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<LossStats> EvaluateParameters(const ModelDef& model, const float* params,
                                             const Dataset& data, int64_t batch_size) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: must be > 0, got ", batch_size));
  }
  if (absl::Status status = CheckModelFitsData(model, data); !status.ok()) return status;
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      CreateReplica(model, DeviceSpec{DeviceSpec::Kind::kCpu, 0}, params);
  if (!replica.ok()) return replica.status();
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(*std::move(replica));
  ReplicaGroup group(std::move(replicas));
  return group.Evaluate(data, batch_size);
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(const v1::JobSpec& spec,
                                                                   const TrainerOptions& options) {
  const v1::JobSpec full = WithDefaults(spec);
  if (absl::Status status = ValidateJobSpec(full); !status.ok()) return status;
  absl::StatusOr<Datasets> data = LoadDatasets(full.dataset(), full.seed());
  if (!data.ok()) return data.status();
  return Create(full, options, *std::move(data));
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(const v1::JobSpec& spec,
                                                                   const TrainerOptions& options,
                                                                   Datasets data) {
  const v1::JobSpec full = WithDefaults(spec);
  if (absl::Status status = ValidateJobSpec(full); !status.ok()) return status;
  if (options.replicas == 0 || options.replicas > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas: must be in [1, 64], got ", options.replicas));
  }
  if (options.eval_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_batch_size: must be > 0, got ", options.eval_batch_size));
  }
  if (data.train.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset ", data.train.source, ": no training samples"));
  }
  absl::StatusOr<ModelDef> model =
      BuildJobModel(full.model(), options.torchscript_bytes, data.train);
  if (!model.ok()) return model.status();

  const uint64_t total_steps = TotalSteps(full, data.train.size());
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(full.optimizer(), total_steps);
  if (!optimizer.ok()) return optimizer.status();

  const int cores = options.cpu_threads > 0
                        ? options.cpu_threads
                        : UsableCores();
  SetCpuMatmulThreads(std::max(1, cores / static_cast<int>(options.replicas)));
  if (model->torchscript != nullptr) {
    SetTorchThreads(std::max(1, cores / static_cast<int>(options.replicas)));
  }

  std::vector<float> parameters(model->num_parameters);
  InitParameters(*model, full.seed(), parameters.data());
  std::vector<std::unique_ptr<Replica>> replicas;
  for (uint32_t i = 0; i < options.replicas; ++i) {
    DeviceSpec device{options.device, static_cast<int>(i)};
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        CreateReplica(*model, device, parameters.data());
    if (!replica.ok()) return replica.status();
    replicas.push_back(*std::move(replica));
  }
  replicas[0]->set_buffer_source(true);
  auto group = std::make_unique<ReplicaGroup>(std::move(replicas));
  return std::unique_ptr<LocalTrainer>(new LocalTrainer(full, options, std::move(data),
                                                        *std::move(optimizer),
                                                        std::move(parameters), std::move(group)));
}

LocalTrainer::LocalTrainer(v1::JobSpec spec, TrainerOptions options, Datasets data,
                           Optimizer optimizer, std::vector<float> parameters,
                           std::unique_ptr<ReplicaGroup> group)
    : spec_(std::move(spec)),
      options_(options),
      data_(std::move(data)),
      sampler_(spec_, data_.train.size()),
      optimizer_(std::move(optimizer)),
      total_steps_(TotalSteps(spec_, data_.train.size())),
      parameters_(std::move(parameters)),
      sum_(parameters_.size()),
      mean_(parameters_.size()),
      state_(parameters_.size() * optimizer_.state_slots(), 0.0f),
      group_(std::move(group)) {}

absl::StatusOr<StepResult> LocalTrainer::Step() {
  if (done()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer: all ", total_steps_, " steps have run"));
  }
  StepResult result;
  result.step = step_;
  result.epoch = sampler_.EpochOf(step_);
  result.learning_rate = optimizer_.LearningRate(step_);
  const std::vector<uint64_t> batch = sampler_.GlobalBatch(step_);
  if (absl::Status s = group_->SetParameters(parameters_.data()); !s.ok()) return s;
  absl::StatusOr<LossStats> stats =
      group_->ComputeGradientSum(data_.train, batch, DropoutKey{spec_.seed(), step_}, sum_.data());
  if (!stats.ok()) return stats.status();
  result.stats = *stats;
  const int64_t trained = model().num_trained;
  // The mean over the batch's loss elements (samples, or tokens of a [N, T] loss).
  MeanGradient(sum_.data(), trained,
               batch.size() * static_cast<uint64_t>(model().loss_elements_per_sample),
               mean_.data());
  optimizer_.Apply(step_, parameters_.data(), mean_.data(), state_.data(), trained);
  // Buffers: replica 0's values (the others contributed zeros), kept unless non-finite,
  // as the PS keeps node 0's.
  const int64_t total = static_cast<int64_t>(parameters_.size());
  bool finite = true;
  for (int64_t j = trained; j < total; ++j) finite = finite && std::isfinite(sum_[j]);
  if (finite) {
    std::copy(sum_.begin() + trained, sum_.end(), parameters_.begin() + trained);
    std::copy(sum_.begin() + trained, sum_.end(), mean_.begin() + trained);
  }
  ++step_;
  return result;
}

absl::StatusOr<LossStats> LocalTrainer::Evaluate(uint64_t max_samples) {
  if (data_.test.size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer: dataset ", data_.train.source, " has no test split"));
  }
  if (absl::Status s = group_->SetParameters(parameters_.data()); !s.ok()) return s;
  return group_->Evaluate(data_.test, options_.eval_batch_size, max_samples);
}

absl::StatusOr<LossStats> LocalTrainer::EvaluateTrain() {
  if (absl::Status s = group_->SetParameters(parameters_.data()); !s.ok()) return s;
  return group_->Evaluate(data_.train, options_.eval_batch_size);
}

}  // namespace tributary::engine
