// A job's own model file on its way to the coordinator: checked, then uploaded.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "cli/commands/commands.h"
#include "cli/model_files.h"
#include "worker/engine/torchscript.h"

namespace tributary::cli {

int Fail(const absl::Status& status) {
  std::cerr << "tributary: " << status << "\n";
  return 1;
}

int UsageError(const absl::Status& status) {
  std::cerr << "tributary: " << status << "\n";
  return 2;
}

absl::Status CheckModelFlag(const v1::JobSpec& spec,
                            const std::shared_ptr<const std::string>& bytes,
                            const engine::Dataset* train) {
  const v1::TorchScriptFile& file = spec.model().torchscript();
  if (!engine::BuiltWithTorch()) {
    std::cerr << "tributary: " << engine::TorchDescription() << ": " << file.file_name()
              << " is not checked here; the workers will check it\n";
    return absl::OkStatus();
  }
  if (absl::Status checked = CheckModelFile(file, bytes, train); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model_file: ", checked.message()));
  }
  return absl::OkStatus();
}

absl::Status UploadModel(CoordinatorClient& client, const v1::JobSpec& spec,
                         const std::string& bytes) {
  const v1::TorchScriptFile& file = spec.model().torchscript();
  absl::StatusOr<v1::UploadModelResponse> uploaded = client.UploadModel(file, bytes);
  if (!uploaded.ok()) return uploaded.status();
  std::cout << "model " << file.file_name() << ": " << uploaded->size_bytes() << " bytes, sha256 "
            << uploaded->sha256().substr(0, 12) << "..."
            << (uploaded->already_stored() ? " (already on the coordinator)" : " uploaded")
            << std::endl;
  return absl::OkStatus();
}

}  // namespace tributary::cli
