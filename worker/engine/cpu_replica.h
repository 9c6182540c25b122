// A replica on the CPU. It reads parameters in place from a host buffer that
// several replicas may share read-only (a worker with R CPU replicas keeps one copy
// of the parameters), and owns its gradient buffer and activations.
#ifndef TRIBUTARY_WORKER_ENGINE_CPU_REPLICA_H_
#define TRIBUTARY_WORKER_ENGINE_CPU_REPLICA_H_

#include <memory>
#include <vector>

#include "worker/engine/cpu_executor.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

class CpuReplica : public Replica {
 public:
  // shared_parameters: model.num_parameters floats that outlive the replica. Callers
  // update them between steps (never during a ForwardBackward/Evaluate call).
  CpuReplica(ModelDef model, const float* shared_parameters);

  const ModelDef& model() const override { return executor_.model(); }
  std::string device() const override { return "cpu"; }
  // The executor reports a layer's gradients after its input gradient, the last use
  // of its weights (cpu_executor.cc).
  bool DoneWithParametersWhenReady() const override { return true; }
  bool ReadsHostParameters() const override { return true; }
  absl::Status SetParameters(const float* host, int64_t offset, int64_t length) override;
  absl::StatusOr<LossStats> ForwardBackward(const Batch& batch, const DropoutKey& key,
                                            const GradientReadyFn& on_ready) override;
  absl::StatusOr<LossStats> Evaluate(const Batch& batch) override;
  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override;
  const float* host_gradients() const override { return gradients_; }
  bool UseGradientBuffer(float* buffer) override;

 private:
  CpuExecutor<float> executor_;
  const float* parameters_;
  std::vector<float> own_gradients_;  // Unless UseGradientBuffer gave it another place.
  float* gradients_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_CPU_REPLICA_H_
