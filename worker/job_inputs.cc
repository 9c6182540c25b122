#include "worker/job_inputs.h"

#include <glog/logging.h>
#include <limits.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/confined_path.h"
#include "common/job_spec.h"
#include "worker/engine/torchscript.h"

namespace tributary::worker {

JobInputs::JobInputs(std::string data_root, std::string node_name,
                     absl::Duration model_fetch_timeout)
    : data_root_(std::move(data_root)),
      node_name_(std::move(node_name)),
      model_fetch_timeout_(model_fetch_timeout) {}

JobInputs::Loaded JobInputs::Load(const v1::JobSpec& spec, CoordinatorLink& link) {
  Loaded loaded;
  // The data and the initial parameters are this job's problem, not a passing one.
  loaded.what = "data";
  loaded.failed = "data";
  loaded.fatal = true;
  absl::StatusOr<const engine::Datasets*> data = Datasets(spec);
  if (!data.ok()) {
    loaded.status = data.status();
    return loaded;
  }
  loaded.datasets = *data;
  loaded.what = "initial parameters";
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> initial = InitialParameters(spec);
  if (!initial.ok()) {
    loaded.status = initial.status();
    return loaded;
  }
  loaded.initial_parameters = *std::move(initial);
  absl::StatusOr<std::shared_ptr<const std::string>> model_file = ModelFile(spec, link);
  if (!model_file.ok()) {
    loaded.what = "model file";
    loaded.failed = "model";
    // A worker without LibTorch will never run it; a fetch may succeed next time.
    loaded.fatal = model_file.status().code() == absl::StatusCode::kUnavailable &&
                   !engine::BuiltWithTorch();
    loaded.status = model_file.status();
    return loaded;
  }
  loaded.model_file = *std::move(model_file);
  return loaded;
}

void JobInputs::Forget() {
  datasets_.reset();
  datasets_key_.clear();
  model_file_.reset();
  model_sha256_.clear();
  initial_parameters_.Clear();
}

absl::StatusOr<std::shared_ptr<const std::string>> JobInputs::ModelFile(const v1::JobSpec& spec,
                                                                     CoordinatorLink& link) {
  if (!IsTorchScript(spec.model())) return std::shared_ptr<const std::string>();
  const v1::TorchScriptFile& file = spec.model().torchscript();
  if (!engine::BuiltWithTorch()) {
    return absl::UnavailableError(absl::StrCat(
        "model file ", file.file_name(), ": worker ", node_name_,
        " was built without LibTorch and cannot run TorchScript models (", engine::TorchDescription(),
        ")"));
  }
  if (model_file_ != nullptr && model_sha256_ == file.sha256()) return model_file_;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<const std::string>> fetched =
      link.FetchModel(file, model_fetch_timeout_);
  if (!fetched.ok()) return fetched.status();
  model_file_ = *fetched;
  model_sha256_ = file.sha256();
  LOG(INFO) << "fetched model file " << file.file_name() << " (" << model_file_->size()
            << " bytes, SHA-256 " << model_sha256_.substr(0, 12) << "...) in "
            << absl::FormatDuration(absl::Now() - start);
  return model_file_;
}

absl::StatusOr<v1::DatasetSpec> JobInputs::ConfinedDataset(const v1::DatasetSpec& dataset) const {
  char cwd[PATH_MAX];
  const std::string base = getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "/";
  v1::DatasetSpec confined = dataset;
  struct Field {
    const char* name;
    std::string* value;
  };
  for (const Field& field :
       {Field{"dataset.directory", confined.mutable_directory()},
        Field{"dataset.train_path", confined.mutable_train_path()},
        Field{"dataset.test_path", confined.mutable_test_path()},
        Field{"dataset.train_labels_path", confined.mutable_train_labels_path()},
        Field{"dataset.test_labels_path", confined.mutable_test_labels_path()}}) {
    if (field.value->empty()) continue;
    absl::StatusOr<std::string> path =
        ConfinePath(field.name, *field.value, base, data_root_, "--data_root");
    if (!path.ok()) return path.status();
    *field.value = *std::move(path);
  }
  return confined;
}

absl::StatusOr<std::shared_ptr<const std::vector<float>>> JobInputs::InitialParameters(
    const v1::JobSpec& spec) {
  if (spec.init_from().empty()) return std::shared_ptr<const std::vector<float>>();
  char cwd[PATH_MAX];
  const std::string base = getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "/";
  absl::StatusOr<std::string> path =
      ConfinePath("init_from", spec.init_from(), base, data_root_, "--data_root");
  if (!path.ok()) return path.status();
  // Bounded like a model: at most kMaxModelParameters floats (checked again against
  // the model's count when the session starts). Kept while the file is unchanged.
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> values =
      initial_parameters_.Read(*path, kMaxModelParameters * sizeof(float));
  if (!values.ok()) return values.status();
  LOG(INFO) << "initial parameters: " << (*values)->size() << " from " << *path;
  return values;
}

absl::StatusOr<const engine::Datasets*> JobInputs::Datasets(const v1::JobSpec& spec) {
  const std::string key = absl::StrCat(spec.dataset().SerializeAsString(), "/", spec.seed());
  if (datasets_ == nullptr || datasets_key_ != key) {
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::DatasetSpec> confined = ConfinedDataset(spec.dataset());
    if (!confined.ok()) return confined.status();
    absl::StatusOr<engine::Datasets> loaded = engine::LoadDatasets(*confined, spec.seed());
    if (!loaded.ok()) return loaded.status();
    datasets_ = std::make_unique<engine::Datasets>(*std::move(loaded));
    datasets_key_ = key;
    LOG(INFO) << "loaded " << datasets_->train.size() << " training and " << datasets_->test.size()
              << " test samples from " << datasets_->train.source << " in "
              << absl::FormatDuration(absl::Now() - start);
  }
  return datasets_.get();
}

}  // namespace tributary::worker
