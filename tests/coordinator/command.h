// Commands the coordinator's multi-process tests run to completion (headless
// Chromium), with their output captured; where to find programs, runfiles and
// temporary paths.
// Long-lived children (the coordinator binary) are common/child_process.h's.
#ifndef TRIBUTARY_TESTS_COORDINATOR_COMMAND_H_
#define TRIBUTARY_TESTS_COORDINATOR_COMMAND_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tributary::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed at the timeout.
  std::string output;  // stdout.
  std::string errors;  // stderr.
};

// Runs a command to completion (its whole process group killed at `timeout`), with
// `env` added to the environment. INTERNAL when it cannot be started.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env,
                                         absl::Duration timeout);

// The first of `names` found on $PATH (or /usr/bin), as a full path.
std::optional<std::string> FindProgram(const std::vector<std::string>& names);

// Path of a file under the test's runfiles, e.g. "services/coordinator/coordinator".
std::string RunfilePath(const std::string& path);

// A unique path under $TEST_TMPDIR.
std::string TempPath(const std::string& name);

// A file's whole content; empty when it cannot be read (a log not written yet).
std::string ReadAll(const std::string& path);

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_COORDINATOR_COMMAND_H_
