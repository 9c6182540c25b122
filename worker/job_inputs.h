// A job's inputs on a worker: its datasets (every path confined to --data_root), its
// TorchScript file (fetched from the coordinator once per file) and its init_from
// parameters, kept across the job's generations and dropped when the job ends
// (Forget), so that nothing of one job is used for the next. One thread (the
// worker's Run loop) uses it.
#ifndef TRIBUTARY_WORKER_JOB_INPUTS_H_
#define TRIBUTARY_WORKER_JOB_INPUTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/float_file.h"
#include "proto/job.pb.h"
#include "worker/coordinator_link.h"
#include "worker/engine/dataset.h"

namespace tributary::worker {

class JobInputs {
 public:
  JobInputs(std::string data_root, std::string node_name, absl::Duration model_fetch_timeout);

  // The job's datasets, loaded again only when the dataset spec or seed changed.
  absl::StatusOr<const engine::Datasets*> Datasets(const v1::JobSpec& spec);
  // The job's TorchScript file (null for native models), fetched through `link`.
  // UNAVAILABLE when this worker was built without LibTorch.
  absl::StatusOr<std::shared_ptr<const std::string>> ModelFile(const v1::JobSpec& spec,
                                                               CoordinatorLink& link);
  // The job's JobSpec.init_from parameters (null without), read once per file (again
  // when it changed) under data_root. INVALID_ARGUMENT naming the path for a file
  // that is not float32.
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> InitialParameters(
      const v1::JobSpec& spec);
  // All three, or which failed (`what`: "data", "initial parameters" or "model file";
  // `failed`: the step-failure reason label, "data" or "model"), why, and whether that
  // is the job's problem for good (fatal: the worker reports WORKER_FAILED) or may pass
  // (a model fetch that failed may succeed next time).
  struct Loaded {
    const engine::Datasets* datasets = nullptr;
    std::shared_ptr<const std::vector<float>> initial_parameters;
    std::shared_ptr<const std::string> model_file;
    absl::Status status;
    const char* what = "";
    const char* failed = "";
    bool fatal = false;
  };
  Loaded Load(const v1::JobSpec& spec, CoordinatorLink& link);
  // The job is over: its inputs go.
  void Forget();

 private:
  // The dataset with every path confined to data_root and resolved.
  absl::StatusOr<v1::DatasetSpec> ConfinedDataset(const v1::DatasetSpec& dataset) const;

  const std::string data_root_;
  const std::string node_name_;
  const absl::Duration model_fetch_timeout_;
  std::string datasets_key_;
  std::unique_ptr<engine::Datasets> datasets_;
  std::string model_sha256_;
  std::shared_ptr<const std::string> model_file_;
  CachedFloatFile initial_parameters_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_JOB_INPUTS_H_
