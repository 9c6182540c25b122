#include "common/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <set>

#include <glog/logging.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tributary {
namespace {

// /proc files say their size is 0: read until the end, at most `limit` bytes.
std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit = 1 << 16) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[4096];
  while (text.size() < limit) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// The entries of a directory that are decimal numbers (tids, fds).
std::vector<uint64_t> NumberedEntries(const std::string& dir, size_t limit) {
  std::vector<uint64_t> entries;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return entries;
  while (const dirent* entry = ::readdir(d)) {
    uint64_t number;
    if (absl::SimpleAtoi(entry->d_name, &number)) entries.push_back(number);
    if (entries.size() >= limit) break;
  }
  ::closedir(d);
  return entries;
}

// "btime <seconds>" of /proc/stat.
std::optional<uint64_t> BootTime(absl::string_view stat) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      uint64_t seconds;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &seconds)) return seconds;
    }
  }
  return std::nullopt;
}

// The soft limit of "Max open files" in /proc/<pid>/limits ("unlimited": none).
std::optional<double> MaxOpenFiles(absl::string_view limits) {
  for (absl::string_view line : absl::StrSplit(limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t soft;
    if (!fields.empty() && absl::SimpleAtoi(fields[0], &soft)) return static_cast<double>(soft);
  }
  return std::nullopt;
}

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

prometheus::MetricFamily OneGauge(std::string name, std::string help, double value) {
  prometheus::MetricFamily family =
      Family(std::move(name), std::move(help), prometheus::MetricType::Gauge);
  family.metric.emplace_back();
  family.metric.back().gauge.value = value;
  return family;
}

// Most threads a read looks at: a process with more is not one of ours behaving.
constexpr size_t kMaxThreadsRead = 4096;
constexpr size_t kMaxFdsCounted = 1 << 20;

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text) {
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
    return absl::InvalidArgumentError(
        absl::StrCat("stat line without a (name): \"", text.substr(0, 64), "\""));
  }
  ProcStat stat;
  stat.name = std::string(text.substr(open + 1, close - open - 1));
  // Fields 3 onwards (state first), so field k is fields[k - 3].
  std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(close + 1), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  if (fields.size() < 22) {
    return absl::InvalidArgumentError(absl::StrCat("stat line of \"", stat.name, "\" has ",
                                                   fields.size() + 2, " fields, want 24 or more"));
  }
  const std::pair<int, uint64_t*> wanted[] = {
      {14, &stat.utime_ticks}, {15, &stat.stime_ticks}, {20, &stat.threads},
      {22, &stat.start_ticks}, {23, &stat.vsize_bytes}, {24, &stat.rss_pages}};
  for (const auto& [field, value] : wanted) {
    if (!absl::SimpleAtoi(fields[field - 3], value)) {
      return absl::InvalidArgumentError(absl::StrCat("stat line of \"", stat.name, "\": field ",
                                                     field, " is \"", fields[field - 3],
                                                     "\", not a count"));
    }
  }
  return stat;
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseContextSwitches(absl::string_view status) {
  std::optional<uint64_t> voluntary, involuntary;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    std::optional<uint64_t>* target = nullptr;
    if (absl::ConsumePrefix(&line, "voluntary_ctxt_switches:")) {
      target = &voluntary;
    } else if (absl::ConsumePrefix(&line, "nonvoluntary_ctxt_switches:")) {
      target = &involuntary;
    } else {
      continue;
    }
    uint64_t value;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("status: context switches \"", line, "\" is not a count"));
    }
    *target = value;
  }
  if (!voluntary || !involuntary) {
    return absl::InvalidArgumentError(
        "status has no voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines");
  }
  return std::make_pair(*voluntary, *involuntary);
}

std::string ThreadLabel(absl::string_view name) {
  std::string label;
  for (char c : name) label.push_back(c >= 0x20 && c < 0x7f ? c : '_');
  return label.empty() ? "_" : label;
}

ProcessCollector::ProcessCollector(Options options)
    : options_(std::move(options)),
      ticks_per_second_(static_cast<double>(std::max<long>(1, ::sysconf(_SC_CLK_TCK)))),
      page_bytes_(static_cast<double>(std::max<long>(1, ::sysconf(_SC_PAGESIZE)))) {}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  std::optional<std::string> text = ReadSmallFile(options_.proc_self + "/stat");
  absl::StatusOr<ProcStat> stat = text ? ParseProcStat(*text)
                                       : absl::NotFoundError(options_.proc_self + "/stat");
  if (stat.ok()) {
    prometheus::MetricFamily cpu =
        Family("process_cpu_seconds_total", "User and system CPU time the process spent, seconds.",
               prometheus::MetricType::Counter);
    cpu.metric.emplace_back();
    cpu.metric.back().counter.value =
        static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks_per_second_;
    families.push_back(std::move(cpu));
    families.push_back(OneGauge("process_resident_memory_bytes", "Resident memory size, bytes.",
                                static_cast<double>(stat->rss_pages) * page_bytes_));
    families.push_back(OneGauge("process_virtual_memory_bytes", "Virtual memory size, bytes.",
                                static_cast<double>(stat->vsize_bytes)));
    families.push_back(OneGauge("tributary_process_threads", "Threads of the process now.",
                                static_cast<double>(stat->threads)));
    if (std::optional<std::string> proc_stat = ReadSmallFile(options_.proc_stat)) {
      if (std::optional<uint64_t> boot = BootTime(*proc_stat)) {
        families.push_back(OneGauge(
            "process_start_time_seconds", "Start time of the process since the Unix epoch, seconds.",
            static_cast<double>(*boot) + static_cast<double>(stat->start_ticks) / ticks_per_second_));
      }
    }
  } else {
    absl::MutexLock lock(&mu_);
    if (!warned_) {
      warned_ = true;
      LOG(WARNING) << "no process metrics: " << stat.status();
    }
  }
  const std::vector<uint64_t> fds = NumberedEntries(options_.proc_self + "/fd", kMaxFdsCounted);
  if (!fds.empty()) {
    families.push_back(OneGauge("process_open_fds", "Open file descriptors.",
                                static_cast<double>(fds.size())));
  }
  if (std::optional<std::string> limits = ReadSmallFile(options_.proc_self + "/limits")) {
    if (std::optional<double> max = MaxOpenFiles(*limits)) {
      families.push_back(
          OneGauge("process_max_fds", "Maximum number of open file descriptors.", *max));
    }
  }
  AddThreads(families);
  return families;
}

std::string ProcessCollector::NameFor(absl::string_view name) const {
  std::string label = ThreadLabel(name);
  if (retired_.count(label) > 0) return label;
  std::set<std::string> names;
  for (const auto& [name_of, totals] : retired_) names.insert(name_of);
  for (const auto& [key, seen] : threads_) names.insert(seen.name);
  if (names.count(label) > 0 || static_cast<int>(names.size()) < options_.max_thread_names) {
    return label;
  }
  return "other";
}

void ProcessCollector::Retire(const Seen& seen) const {
  Totals& totals = retired_[seen.name];
  totals.ticks += seen.ticks - seen.base_ticks;
  totals.voluntary += seen.voluntary - seen.base_voluntary;
  totals.involuntary += seen.involuntary - seen.base_involuntary;
}

void ProcessCollector::AddThreads(std::vector<prometheus::MetricFamily>& families) const {
  const std::string task_dir = options_.proc_self + "/task";
  std::vector<uint64_t> tids = NumberedEntries(task_dir, kMaxThreadsRead);
  if (tids.empty()) return;
  // Oldest first (tids grow): the process's first threads get the names' series.
  std::sort(tids.begin(), tids.end());
  absl::MutexLock lock(&mu_);
  for (auto& [key, seen] : threads_) seen.present = false;
  for (uint64_t tid : tids) {
    const std::string dir = absl::StrCat(task_dir, "/", tid);
    std::optional<std::string> stat_text = ReadSmallFile(dir + "/stat");
    std::optional<std::string> status_text = ReadSmallFile(dir + "/status");
    if (!stat_text || !status_text) continue;  // It ended meanwhile.
    absl::StatusOr<ProcStat> stat = ParseProcStat(*stat_text);
    absl::StatusOr<std::pair<uint64_t, uint64_t>> switches = ParseContextSwitches(*status_text);
    if (!stat.ok() || !switches.ok()) continue;
    const uint64_t ticks = stat->utime_ticks + stat->stime_ticks;
    const auto key = std::make_pair(tid, stat->start_ticks);
    auto found = threads_.find(key);
    if (found == threads_.end()) {
      Seen seen;
      seen.name = NameFor(stat->name);
      found = threads_.emplace(key, std::move(seen)).first;
    } else if (const std::string label = ThreadLabel(stat->name);
               label != found->second.name && NameFor(label) != found->second.name) {
      // Renamed: what it used until the last read stays with the old name, which it
      // leaves from here (when between the reads it took the new one is not known).
      Seen& seen = found->second;
      Retire(seen);
      seen.name = NameFor(label);
      seen.base_ticks = seen.ticks;
      seen.base_voluntary = seen.voluntary;
      seen.base_involuntary = seen.involuntary;
    }
    Seen& seen = found->second;
    seen.present = true;
    // The kernel's figures only grow; max() keeps a counter monotonic whatever it reads.
    seen.ticks = std::max(seen.ticks, ticks);
    seen.voluntary = std::max(seen.voluntary, switches->first);
    seen.involuntary = std::max(seen.involuntary, switches->second);
  }
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->second.present) {
      ++it;
      continue;
    }
    Retire(it->second);
    it = threads_.erase(it);
  }
  std::map<std::string, Totals> totals = retired_;
  for (const auto& [key, seen] : threads_) {
    Totals& t = totals[seen.name];
    t.ticks += seen.ticks - seen.base_ticks;
    t.voluntary += seen.voluntary - seen.base_voluntary;
    t.involuntary += seen.involuntary - seen.base_involuntary;
  }
  prometheus::MetricFamily cpu =
      Family("tributary_thread_cpu_seconds_total",
             "User and system CPU time of the process's threads by thread name, seconds.",
             prometheus::MetricType::Counter);
  prometheus::MetricFamily switches =
      Family("tributary_thread_context_switches_total",
             "Context switches of the process's threads by thread name: voluntary (the "
             "thread waited) and involuntary (it was preempted).",
             prometheus::MetricType::Counter);
  for (const auto& [name, t] : totals) {
    cpu.metric.emplace_back();
    cpu.metric.back().label = {{"thread", name}};
    cpu.metric.back().counter.value = static_cast<double>(t.ticks) / ticks_per_second_;
    for (const auto& [kind, count] :
         {std::make_pair("voluntary", t.voluntary), std::make_pair("involuntary", t.involuntary)}) {
      switches.metric.emplace_back();
      switches.metric.back().label = {{"kind", kind}, {"thread", name}};
      switches.metric.back().counter.value = static_cast<double>(count);
    }
  }
  families.push_back(std::move(cpu));
  families.push_back(std::move(switches));
}

}  // namespace tributary
