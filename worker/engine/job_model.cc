#include "worker/engine/job_model.h"

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/sha256.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

namespace tributary::engine {

absl::StatusOr<ModelDef> BuildJobModel(const v1::ModelSpec& spec,
                                       std::shared_ptr<const std::string> torchscript_bytes,
                                       const Dataset& train) {
  if (!IsTorchScript(spec)) {
    absl::StatusOr<ModelDef> model = BuildModel(spec);
    if (!model.ok()) return model.status();
    if (absl::Status fits = CheckModelFitsData(*model, train); !fits.ok()) return fits;
    return model;
  }
  const v1::TorchScriptFile& file = spec.torchscript();
  if (torchscript_bytes == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model file ", file.file_name(), ": its bytes were not provided"));
  }
  const std::string digest = Sha256Hex(*torchscript_bytes);
  if (digest != file.sha256()) {
    return absl::DataLossError(absl::StrCat("model file ", file.file_name(), ": SHA-256 ", digest,
                                            " but the job names ", file.sha256()));
  }
  return LoadTorchScriptModel(std::move(torchscript_bytes), file.file_name(), &train);
}

}  // namespace tributary::engine
