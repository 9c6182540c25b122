#include "bench/common/bench_runfiles.h"

#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace tributary::bench {

absl::StatusOr<BenchRunfiles> BenchRunfiles::Create(const std::string& argv0) {
  std::string error;
  std::shared_ptr<bazel::tools::cpp::runfiles::Runfiles> runfiles(
      bazel::tools::cpp::runfiles::Runfiles::Create(argv0, &error));
  if (runfiles == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no runfiles for ", argv0, " (run the benchmark with bazel run): ", error));
  }
  for (const auto& [name, value] : runfiles->EnvVars()) setenv(name.c_str(), value.c_str(), 1);
  return BenchRunfiles(std::move(runfiles));
}

absl::StatusOr<std::string> BenchRunfiles::Find(const std::string& path) const {
  const std::string found = runfiles_->Rlocation(path);
  if (found.empty() || access(found.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("runfile ", path, " not found (looked at '", found,
                                            "'); is it a data dependency of the benchmark?"));
  }
  return found;
}

}  // namespace tributary::bench
