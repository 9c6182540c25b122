#include "tests/coordinator/command.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/child_process.h"

namespace tributary::testing {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TempPath(const std::string& name) {
  static int counter = 0;
  const char* root = std::getenv("TEST_TMPDIR");
  return absl::StrCat(root == nullptr ? "/tmp" : root, "/", name, "-", getpid(), "-", ++counter);
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& env,
                                         absl::Duration timeout) {
  ChildOptions options;
  options.env.assign(env.begin(), env.end());
  options.stderr_path = TempPath("command.err");
  const std::string out_path = TempPath("command.out");
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(argv.empty() ? "command" : argv[0], argv, out_path, options);
  if (!child.ok()) return child.status();
  CommandResult result;
  const bool exited = (*child)->Wait(timeout);
  // At the timeout, or after it exited: its helpers (Chromium's zygotes) go too.
  (*child)->KillGroup();
  result.exit_code = exited && (*child)->exit_signal() == 0 ? (*child)->exit_code() : -1;
  result.output = ReadAll(out_path);
  result.errors = ReadAll(options.stderr_path);
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
