#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace tributary {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::string name,
                                                                 std::vector<std::string> argv,
                                                                 std::string log_path,
                                                                 const ChildOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": empty command"));
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat(name, ": cannot execute ", argv[0], ": ", std::strerror(errno)));
  }
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InternalError(
        absl::StrCat(name, ": cannot open log ", log_path, ": ", std::strerror(errno)));
  }
  int errors = log;
  if (!options.stderr_path.empty()) {
    errors = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (errors < 0) {
      close(log);
      return absl::InternalError(absl::StrCat(name, ": cannot open ", options.stderr_path, ": ",
                                              std::strerror(errno)));
    }
  }
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  // The environment is built before fork: the child may only call async-signal-safe
  // functions.
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string line(*entry);
    bool replaced = false;
    for (const auto& [key, value] : options.env) {
      replaced = replaced || line.rfind(key + "=", 0) == 0;
    }
    if (!replaced) environment.push_back(line);
  }
  for (const auto& [key, value] : options.env) environment.push_back(key + "=" + value);
  std::vector<char*> env;
  for (std::string& entry : environment) env.push_back(entry.data());
  env.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    if (errors != log) close(errors);
    return absl::InternalError(absl::StrCat(name, ": fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: never outlive the launcher, whatever kills it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    // The launcher blocks SIGINT/SIGTERM for its own signal thread; the child must not
    // inherit that mask, and Ctrl-C in the terminal must reach only the launcher, which
    // then stops the children in order.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    dup2(log, STDOUT_FILENO);
    dup2(errors, STDERR_FILENO);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execve(args[0], args.data(), env.data());
    dprintf(STDERR_FILENO, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(log);
  if (errors != log) close(errors);
  return std::unique_ptr<ChildProcess>(new ChildProcess(std::move(name), pid, std::move(log_path)));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) Stop(absl::Seconds(5));
}

bool ChildProcess::Running() {
  if (reaped_) return false;
  int status = 0;
  const pid_t result = waitpid(pid_, &status, WNOHANG);
  if (result == 0) return true;
  reaped_ = true;
  if (result == pid_) {
    if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit_signal_ = WTERMSIG(status);
  }
  return false;
}

std::string ChildProcess::ExitDescription() {
  if (Running()) return "running";
  if (exit_signal_ != 0) {
    return absl::StrCat("killed by signal ", exit_signal_, " (", strsignal(exit_signal_), ")");
  }
  return absl::StrCat("exited with code ", exit_code_);
}

void ChildProcess::Signal(int signal_number) {
  if (!reaped_) kill(pid_, signal_number);
}

bool ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

void ChildProcess::KillGroup() {
  if (reaped_) return;
  kill(-pid_, SIGKILL);
  Wait(absl::Seconds(10));
}

void ChildProcess::Stop(absl::Duration grace) {
  if (!Running()) return;
  Signal(SIGTERM);
  Finish(grace);
}

void ChildProcess::Finish(absl::Duration grace) {
  if (Wait(grace)) return;
  Signal(SIGKILL);
  Wait(absl::Seconds(10));
}

std::string ChildProcess::LogTail(int lines) const {
  std::ifstream in(log_path_);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

}  // namespace tributary
