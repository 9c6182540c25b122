#include "common/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tributary {
namespace {

std::optional<int> QuotaCores(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<int> CoresOfCpuMax(const std::string& cpu_max) {
  const std::vector<std::string> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &quota) ||
      !absl::SimpleAtoi(parts[1], &period)) {
    return std::nullopt;  // "max 100000" (no limit), or not a cpu.max.
  }
  return QuotaCores(quota, period);
}

std::optional<int> CoresOfCfsQuota(const std::string& quota_us, const std::string& period_us) {
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(quota_us), &quota) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(period_us), &period)) {
    return std::nullopt;
  }
  return QuotaCores(quota, period);  // -1: no limit.
}

int UsableCores() {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cores = std::min(cores, std::max(1, CPU_COUNT(&set)));
  }
  std::optional<int> quota = CoresOfCpuMax(ReadSmallFile("/sys/fs/cgroup/cpu.max"));
  if (!quota.has_value()) {
    quota = CoresOfCfsQuota(ReadSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                            ReadSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  }
  if (quota.has_value()) cores = std::min(cores, *quota);
  return std::max(1, cores);
}

}  // namespace tributary
