// A child process (of `tributary local`, a test or a benchmark): started with its
// output in a log file, tied to its parent's life (it gets SIGTERM if the parent dies,
// even by SIGKILL), in a process group of its own (so its helpers go with it), stopped
// with SIGTERM then SIGKILL, and able to show its last log lines when it dies.
#ifndef TRIBUTARY_COMMON_CHILD_PROCESS_H_
#define TRIBUTARY_COMMON_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tributary {

struct ChildOptions {
  // Variables added to (or replacing those of) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Where stderr goes; empty = the log file, with stdout.
  std::string stderr_path;
};

class ChildProcess {
 public:
  // Starts `argv` (argv[0] is the binary's path) with stdout (and stderr, unless the
  // options send it elsewhere) appended to log_path. INTERNAL naming the binary when it
  // cannot be started.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::string name,
                                                            std::vector<std::string> argv,
                                                            std::string log_path,
                                                            const ChildOptions& options = {});
  ~ChildProcess();  // Stops the process if it still runs.

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // True while the process runs; reaps it (and records its exit) once it is gone.
  bool Running();
  // "exited with code 3", "killed by signal 9", or "running".
  std::string ExitDescription();
  int exit_code() const { return exit_code_; }  // -1 while running or when signalled.
  int exit_signal() const { return exit_signal_; }  // 0 unless a signal ended it.

  // SIGTERM, wait up to `grace`, then SIGKILL. Returns once the process is reaped.
  void Stop(absl::Duration grace);
  // For a process already signalled: waits up to `grace`, then SIGKILL; returns once it
  // is reaped. (A second SIGTERM would make a draining service exit at once.)
  void Finish(absl::Duration grace);
  // Sends a signal without waiting.
  void Signal(int signal_number);
  // SIGKILL to its whole process group (helpers it started included), then reaps it.
  void KillGroup();
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

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CHILD_PROCESS_H_
