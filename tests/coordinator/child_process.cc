#include "tests/coordinator/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace tributary::testing {
namespace {

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Polls waitpid until the child exits or `timeout` passes.
absl::StatusOr<int> WaitFor(pid_t pid, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) return absl::InternalError(absl::StrCat("waitpid ", pid, ": ", strerror(errno)));
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                                 const std::string& log_path) {
  std::vector<std::string> args = argv;
  std::vector<char*> pointers = Pointers(args);
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // No orphan if the test dies.
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execv(pointers[0], pointers.data());
    _exit(127);
  }
  close(log);
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<int> ChildProcess::Stop(int signal, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no child");
  kill(pid_, signal);
  absl::StatusOr<int> status = WaitFor(pid_, timeout);
  if (status.ok()) pid_ = -1;
  return status;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no child");
  absl::StatusOr<int> status = WaitFor(pid_, timeout);
  if (status.ok()) pid_ = -1;
  return status;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env,
                                         absl::Duration timeout) {
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers = Pointers(args);
  std::map<std::string, std::string> merged;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string line(*entry);
    const size_t equals = line.find('=');
    if (equals != std::string::npos) merged[line.substr(0, equals)] = line.substr(equals + 1);
  }
  for (const auto& [key, value] : env) merged[key] = value;
  std::vector<std::string> environment;
  for (const auto& [key, value] : merged) environment.push_back(key + "=" + value);
  std::vector<char*> env_pointers = Pointers(environment);

  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);  // Its helpers (Chromium's zygotes) die with it at the timeout.
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execve(arg_pointers[0], arg_pointers.data(), env_pointers.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  CommandResult result;
  const absl::Time give_up = absl::Now() + timeout;
  bool out_open = true;
  bool err_open = true;
  bool killed = false;
  while (out_open || err_open) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left), 100))) <
        0) {
      if (errno == EINTR) continue;
      break;
    }
    char buffer[1 << 14];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (i == 0 ? result.output : result.errors).append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (i == 0 ? out_open : err_open) = false;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!killed) kill(-pid, SIGKILL);  // Leftover helpers of the process group.
  result.exit_code = killed ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return result;
}

std::optional<std::string> FindProgram(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> directories =
      absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty());
  directories.push_back("/usr/bin");
  for (const std::string& name : names) {
    for (const std::string& directory : directories) {
      const std::string candidate = directory + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return std::nullopt;
}

std::string RunfilePath(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return absl::StrCat(root == nullptr ? "." : root, "/tributary/", path);
}

}  // namespace tributary::testing
