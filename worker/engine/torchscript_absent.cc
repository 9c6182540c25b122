// The TorchScript engine in a build without LibTorch (@local_torch found none): every
// entry point says so, and the native engine runs as always.
#include "absl/strings/str_cat.h"
#include "worker/engine/torchscript.h"

namespace tributary::engine {
namespace {

absl::Status Unavailable(const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat(what,
                   ": this binary was built without LibTorch, so it cannot run TorchScript models; "
                   "install Debian's libtorch-dev (bash scripts/setup) and rebuild"));
}

}  // namespace

bool BuiltWithTorch() { return false; }

std::string TorchDescription() { return "no LibTorch (built without libtorch-dev)"; }

absl::StatusOr<ModelDef> LoadTorchScriptModel(std::shared_ptr<const std::string> bytes,
                                              const std::string& file_name,
                                              const Dataset* fit_to) {
  return Unavailable(absl::StrCat("model file ", file_name));
}

absl::StatusOr<std::unique_ptr<Replica>> CreateTorchScriptReplica(const ModelDef& model,
                                                                  const float* host_parameters) {
  return Unavailable(absl::StrCat("model ", model.name));
}

void SetTorchThreads(int threads) {}

absl::Status ExportTorchScript(const ModelDef& model, const float* values,
                               const std::string& path) {
  return Unavailable(absl::StrCat("export to ", path));
}

}  // namespace tributary::engine
