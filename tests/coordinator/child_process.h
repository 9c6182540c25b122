// Runs programs for the coordinator's multi-process tests: a long-lived child (the
// coordinator binary) that is stopped on purpose, and a command run to completion
// with its output captured (headless Chromium). Children die with the test.
#ifndef TRIBUTARY_TESTS_COORDINATOR_CHILD_PROCESS_H_
#define TRIBUTARY_TESTS_COORDINATOR_CHILD_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tributary::testing {

class ChildProcess {
 public:
  ChildProcess() = default;  // No child.
  // Starts argv[0] (a path) with stdout and stderr appended to `log_path`.
  static absl::StatusOr<ChildProcess> Start(const std::vector<std::string>& argv,
                                            const std::string& log_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();  // SIGKILL and reap when still running.

  pid_t pid() const { return pid_; }
  // Sends `signal` and waits up to `timeout` for the exit; returns the wait status.
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout);
  // The exit status once the child has exited on its own within `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

struct CommandResult {
  int exit_code = -1;  // -1 when killed at the timeout.
  std::string output;  // stdout.
  std::string errors;  // stderr.
};

// Runs a command to completion (killed at `timeout`), with `env` added to the
// environment. INTERNAL when it cannot be started.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env,
                                         absl::Duration timeout);

// The first of `names` found on $PATH (or /usr/bin), as a full path.
std::optional<std::string> FindProgram(const std::vector<std::string>& names);

// Path of a file under the test's runfiles, e.g. "services/coordinator/coordinator".
std::string RunfilePath(const std::string& path);

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_COORDINATOR_CHILD_PROCESS_H_
