#include "bench/common/run_to_end.h"

#include <cstdio>
#include <memory>

#include "absl/time/clock.h"
#include "common/child_process.h"
#include "common/tls.h"

namespace tributary::bench {

absl::StatusOr<int> RunToEnd(const std::string& name, const std::vector<std::string>& argv,
                             const std::string& log_path, double* seconds) {
  std::remove(log_path.c_str());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(name, argv, log_path);
  if (!child.ok()) return child.status();
  while ((*child)->Running()) absl::SleepFor(absl::Milliseconds(20));
  if (seconds != nullptr) *seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return (*child)->exit_code();
}

std::string LastLine(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return "";
  std::string content = *text;
  while (!content.empty() && content.back() == '\n') content.pop_back();
  const size_t newline = content.rfind('\n');
  return newline == std::string::npos ? content : content.substr(newline + 1);
}

}  // namespace tributary::bench
