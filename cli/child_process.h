// A child process of the local launcher: started with its output in a log file,
// tied to the launcher's life (it gets SIGTERM if the launcher dies, even by
// SIGKILL), stopped with SIGTERM then SIGKILL, and able to show its last log lines
// when it dies unexpectedly.
#ifndef TRIBUTARY_CLI_CHILD_PROCESS_H_
#define TRIBUTARY_CLI_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tributary::cli {

class ChildProcess {
 public:
  // Starts `argv` (argv[0] is the binary's path) with stdout and stderr appended to
  // log_path. INTERNAL naming the binary when it cannot be started.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::string name,
                                                            std::vector<std::string> argv,
                                                            std::string log_path);
  ~ChildProcess();  // Stops the process if it still runs.

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // True while the process runs; reaps it (and records its exit) once it is gone.
  bool Running();
  // "exited with code 3", "killed by signal 9", or "running".
  std::string ExitDescription();
  int exit_code() const { return exit_code_; }  // -1 while running or when signalled.

  // SIGTERM, wait up to `grace`, then SIGKILL. Returns once the process is reaped.
  void Stop(absl::Duration grace);
  // Sends a signal without waiting.
  void Signal(int signal_number);
  // Blocks until the process exits or `timeout` passes; true when it exited.
  bool Wait(absl::Duration timeout);

  // The last `lines` lines of its log.
  std::string LogTail(int lines) const;

  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(std::string name, pid_t pid, std::string log_path)
      : name_(std::move(name)), pid_(pid), log_path_(std::move(log_path)) {}

  const std::string name_;
  const pid_t pid_;
  const std::string log_path_;
  bool reaped_ = false;
  int exit_code_ = -1;
  int exit_signal_ = 0;
};

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_CHILD_PROCESS_H_
