#include "bench/common/cpu_window.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tributary::bench {
namespace {

std::string Ms(double ms) { return absl::StrFormat("%.3f ms", ms); }
std::string Share(double share) { return absl::StrFormat("%.0f%%", 100 * share); }

}  // namespace

absl::StatusOr<MachineTicks> ParseMachineTicks(absl::string_view proc_stat) {
  absl::string_view line = proc_stat.substr(0, proc_stat.find('\n'));
  if (!absl::ConsumePrefix(&line, "cpu ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/stat starts with \"", line.substr(0, 32), "\", not \"cpu \""));
  }
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
  MachineTicks ticks;
  uint64_t* const wanted[] = {&ticks.user,   &ticks.nice, &ticks.system,  &ticks.idle,
                              &ticks.iowait, &ticks.irq,  &ticks.softirq, &ticks.steal};
  for (size_t i = 0; i < std::size(wanted); ++i) {
    if (i >= fields.size()) {
      // Kernels before 2.6.11 had no steal column; older ones fewer still.
      if (i >= 4) break;
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/stat's cpu line has ", fields.size(), " fields, want 4 or more"));
    }
    if (!absl::SimpleAtoi(fields[i], wanted[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/stat's cpu line: field ", i + 1, " is \"", fields[i], "\""));
    }
  }
  return ticks;
}

std::optional<MachineTicks> ReadMachineTicks() {
  std::ifstream file("/proc/stat");
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  absl::StatusOr<MachineTicks> ticks = ParseMachineTicks(line);
  if (!ticks.ok()) return std::nullopt;
  return *ticks;
}

double CpuUse::ProcessesSeconds() const {
  double total = 0;
  for (const auto& [kind, seconds] : process_seconds) total += seconds;
  return total;
}

absl::StatusOr<CpuUse> CpuBetween(const CpuSnapshot& first, const CpuSnapshot& last,
                                  unsigned cores) {
  if (first.processes != last.processes) {
    const auto list = [](const std::map<std::string, int>& processes) {
      std::vector<std::string> parts;
      for (const auto& [kind, count] : processes) parts.push_back(absl::StrCat(count, " ", kind));
      return absl::StrJoin(parts, ", ");
    };
    return absl::FailedPreconditionError(
        absl::StrCat("the readings saw different processes: ", list(first.processes),
                     " against ", list(last.processes)));
  }
  const auto workers = first.processes.find("worker");
  if (workers == first.processes.end() || last.worker_steps <= first.worker_steps) {
    return absl::FailedPreconditionError("no worker step ran between the readings");
  }
  CpuUse use;
  use.seconds = absl::ToDoubleSeconds(last.at - first.at);
  use.job_steps = static_cast<double>(last.worker_steps - first.worker_steps) / workers->second;
  use.cores = cores;
  for (const auto& [kind, seconds] : last.process_seconds) {
    const auto before = first.process_seconds.find(kind);
    use.process_seconds[kind] =
        std::max(0.0, seconds - (before == first.process_seconds.end() ? 0 : before->second));
  }
  for (const auto& [key, seconds] : last.thread_seconds) {
    const auto before = first.thread_seconds.find(key);
    const double spent =
        seconds - (before == first.thread_seconds.end() ? 0 : before->second);
    if (spent > 0) use.thread_seconds[key] = spent;
  }
  use.voluntary = std::max(0.0, last.voluntary - first.voluntary);
  use.involuntary = std::max(0.0, last.involuntary - first.involuntary);
  if (first.machine.has_value() && last.machine.has_value() &&
      last.machine->Total() > first.machine->Total()) {
    const MachineTicks& a = *first.machine;
    const MachineTicks& b = *last.machine;
    const double total = static_cast<double>(b.Total() - a.Total());
    use.machine_user = static_cast<double>((b.user + b.nice) - (a.user + a.nice)) / total;
    use.machine_system = static_cast<double>((b.system + b.irq + b.softirq) -
                                             (a.system + a.irq + a.softirq)) /
                         total;
    use.machine_idle = static_cast<double>((b.idle + b.iowait) - (a.idle + a.iowait)) / total;
    use.machine_busy = 1 - use.machine_idle;
  }
  return use;
}

std::string CpuUseLines(const CpuUse& use, int threads) {
  if (!use.measured()) return "";
  std::string out = absl::StrFormat(
      "  CPU per job step (%.0f steps, %.2f s, read from every process's /metrics while the "
      "job ran):\n",
      use.job_steps, use.seconds);
  for (const char* kind : {"worker", "shard", "coordinator"}) {
    const auto spent = use.process_seconds.find(kind);
    if (spent == use.process_seconds.end()) continue;
    std::vector<std::pair<double, std::string>> by_thread;
    double named = 0;
    for (const auto& [key, seconds] : use.thread_seconds) {
      if (key.first != kind) continue;
      by_thread.emplace_back(seconds, key.second);
    }
    std::sort(by_thread.rbegin(), by_thread.rend());
    std::vector<std::string> parts;
    for (int i = 0; i < static_cast<int>(by_thread.size()) && i < threads; ++i) {
      parts.push_back(
          absl::StrFormat("%s %.3f", by_thread[i].second, use.PerStepMs(by_thread[i].first)));
      named += by_thread[i].first;
    }
    // The rest of the process: smaller threads, and threads too short-lived to be read.
    const double rest = spent->second - named;
    if (!parts.empty() && use.PerStepMs(rest) >= 0.0005) {
      parts.push_back(absl::StrFormat("other %.3f", use.PerStepMs(rest)));
    }
    const std::string title = std::string(kind) == "shard"    ? "PS shards"
                              : std::string(kind) == "worker" ? "workers"
                                                              : kind;
    absl::StrAppendFormat(&out, "    %-16s %10s   %s\n", title, Ms(use.PerStepMs(spent->second)),
                          absl::StrJoin(parts, ", "));
  }
  const double all = use.PerStepMs(use.ProcessesSeconds());
  if (use.cores > 0 && use.seconds > 0) {
    const double capacity = 1000 * use.seconds * use.cores / use.job_steps;
    absl::StrAppendFormat(&out, "    %-16s %10s   of the %u cores' %s per step: %s\n",
                          "all of them", Ms(all), use.cores, Ms(capacity),
                          Share(all / capacity));
  }
  if (use.machine_busy >= 0) {
    absl::StrAppendFormat(&out,
                          "    %-16s %10s   busy (user %s, system %s), idle %s: every process "
                          "on it\n",
                          "the machine", Share(use.machine_busy), Share(use.machine_user),
                          Share(use.machine_system), Share(use.machine_idle));
  }
  absl::StrAppendFormat(&out,
                        "    %-16s %10.1f voluntary (a thread waited), %.1f involuntary (one "
                        "was preempted) per step\n",
                        "context switches", use.voluntary / use.job_steps,
                        use.involuntary / use.job_steps);
  return out;
}

std::string CpuUseJson(const CpuUse& use) {
  if (!use.measured()) return "null";
  std::vector<std::string> kinds;
  for (const auto& [kind, seconds] : use.process_seconds) {
    kinds.push_back(absl::StrFormat("\"%s\": %.4f", kind, use.PerStepMs(seconds)));
  }
  std::vector<std::string> threads;
  for (const auto& [key, seconds] : use.thread_seconds) {
    // Thread names are printable ASCII (ThreadLabel); quotes and backslashes escaped.
    std::string name = absl::StrCat(key.first, "/", key.second);
    std::string escaped;
    for (char c : name) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      if (c >= 0x20 && c < 0x7f) escaped.push_back(c);
    }
    threads.push_back(absl::StrFormat("\"%s\": %.4f", escaped, use.PerStepMs(seconds)));
  }
  const auto share = [](double value) {
    return value < 0 ? std::string("null") : absl::StrFormat("%.4f", value);
  };
  return absl::StrFormat(
      "{\"job_steps\": %.0f, \"seconds\": %.3f, \"cores\": %u, \"ms_per_step\": {%s}, "
      "\"thread_ms_per_step\": {%s}, \"voluntary_switches_per_step\": %.2f, "
      "\"involuntary_switches_per_step\": %.2f, \"machine_busy\": %s, \"machine_user\": %s, "
      "\"machine_system\": %s, \"machine_idle\": %s}",
      use.job_steps, use.seconds, use.cores, absl::StrJoin(kinds, ", "),
      absl::StrJoin(threads, ", "), use.voluntary / use.job_steps,
      use.involuntary / use.job_steps, share(use.machine_busy), share(use.machine_user),
      share(use.machine_system), share(use.machine_idle));
}

}  // namespace tributary::bench
