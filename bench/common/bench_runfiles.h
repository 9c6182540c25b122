// Where a benchmark finds the programs it runs as children: its own Bazel runfiles
// (the binaries are data dependencies of the bench target). Creating it also exports
// the runfiles environment, so that a child such as `tributary local` finds the
// binaries it starts in turn.
#ifndef TRIBUTARY_BENCH_COMMON_BENCH_RUNFILES_H_
#define TRIBUTARY_BENCH_COMMON_BENCH_RUNFILES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace tributary::bench {

class BenchRunfiles {
 public:
  // FAILED_PRECONDITION when the program has no runfiles (not started by bazel run
  // and no RUNFILES_DIR / RUNFILES_MANIFEST_FILE in the environment).
  static absl::StatusOr<BenchRunfiles> Create(const std::string& argv0);

  // The absolute path of `path` ("tributary/cli/tributary": workspace name, then the
  // path in the repository). NOT_FOUND naming the path when it is not there.
  absl::StatusOr<std::string> Find(const std::string& path) const;

 private:
  explicit BenchRunfiles(std::shared_ptr<bazel::tools::cpp::runfiles::Runfiles> runfiles)
      : runfiles_(std::move(runfiles)) {}
  std::shared_ptr<bazel::tools::cpp::runfiles::Runfiles> runfiles_;
};

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_BENCH_RUNFILES_H_
