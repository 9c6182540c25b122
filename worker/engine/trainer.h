// The single-process trainer: the reference the distributed SYNC system is compared
// against. Each step takes the step's global batch (Sampler), splits it over R
// in-process replicas (ReplicaGroup, the same split/sum path a worker takes), divides
// the gradient sum by the batch's sample count and applies common/optimizer.h to the
// whole flat buffer, exactly as the PS shards apply it partition by partition.
//
//   auto trainer = LocalTrainer::Create(spec, {.replicas = 2});
//   for (int i = 0; i < 100; ++i) (*trainer)->Step();
//   const std::vector<float>& params = (*trainer)->parameters();  // after 100 steps
#ifndef TRIBUTARY_WORKER_ENGINE_TRAINER_H_
#define TRIBUTARY_WORKER_ENGINE_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model.h"
#include "worker/engine/replica_factory.h"
#include "worker/engine/replica_group.h"
#include "worker/engine/sampler.h"

namespace tributary::engine {

struct TrainerOptions {
  uint32_t replicas = 1;                             // In-process replicas the batch is split over.
  DeviceSpec::Kind device = DeviceSpec::Kind::kCpu;  // kGpu: replica i on cuda:i.
  int cpu_threads = 0;  // Cores for CPU matmuls in all; 0 = all the machine has.
  int64_t eval_batch_size = 1000;
  // The job's TorchScript file when spec.model is torchscript (ReadModelFile).
  std::shared_ptr<const std::string> torchscript_bytes;
};

struct StepResult {
  uint64_t step = 0;  // The step that ran (0-based).
  uint64_t epoch = 0;
  float learning_rate = 0;
  LossStats stats;  // Summed over the step's global batch.
};

// mean[j] = sum[j] / samples, in float: the division the PS performs too.
void MeanGradient(const float* sum, int64_t n, uint64_t samples, float* mean);

class LocalTrainer {
 public:
  // spec as submitted: WithDefaults is applied and ValidateJobSpec checked here. The
  // datasets are read from spec.dataset (or given).
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(const v1::JobSpec& spec,
                                                              const TrainerOptions& options);
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(const v1::JobSpec& spec,
                                                              const TrainerOptions& options,
                                                              Datasets data);

  // Runs step() and advances. FAILED_PRECONDITION once every step has run.
  absl::StatusOr<StepResult> Step();

  // Loss and accuracy of the current parameters on the test split's first
  // `max_samples` samples (0: all; FAILED_PRECONDITION when there is none) or on the
  // training split.
  absl::StatusOr<LossStats> Evaluate(uint64_t max_samples = 0);
  absl::StatusOr<LossStats> EvaluateTrain();

  uint64_t step() const { return step_; }
  uint64_t total_steps() const { return total_steps_; }
  bool done() const { return step_ >= total_steps_; }
  const std::vector<float>& parameters() const { return parameters_; }
  // The mean gradient of the last step (what the optimizer was given).
  const std::vector<float>& last_mean_gradient() const { return mean_; }
  const ModelDef& model() const { return group_->model(); }
  const v1::JobSpec& spec() const { return spec_; }
  const Datasets& data() const { return data_; }
  Sampler& sampler() { return sampler_; }

 private:
  LocalTrainer(v1::JobSpec spec, TrainerOptions options, Datasets data, Optimizer optimizer,
               std::vector<float> parameters, std::unique_ptr<ReplicaGroup> group);

  v1::JobSpec spec_;
  TrainerOptions options_;
  Datasets data_;
  Sampler sampler_;
  Optimizer optimizer_;
  uint64_t total_steps_;
  uint64_t step_ = 0;
  std::vector<float> parameters_;
  std::vector<float> sum_, mean_, state_;
  std::unique_ptr<ReplicaGroup> group_;
};

// Loss and accuracy of `params` (model.num_parameters floats, read in place) on `data`,
// on one CPU replica (native or TorchScript), in chunks of batch_size samples. For a worker or a test that
// holds a parameter buffer and no trainer.
absl::StatusOr<LossStats> EvaluateParameters(const ModelDef& model, const float* params,
                                             const Dataset& data, int64_t batch_size = 1000);

// Checks that a model fits the data: input sizes equal, enough classes.
absl::Status CheckModelFitsData(const ModelDef& model, const Dataset& data);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_TRAINER_H_
