// What the process itself costs, read from /proc at every scrape of /metrics: the
// standard Prometheus process metrics (process_cpu_seconds_total, memory, file
// descriptors, start time; the names every client library uses) and the CPU time and
// context switches of the process's threads by name ("train", "push", "lane-read",
// "shard-read", ...; see NameThisThread), so that a Prometheus can say which stage of a
// step a process spends its cores on, and how often its threads hand work over.
#ifndef TRIBUTARY_COMMON_PROCESS_METRICS_H_
#define TRIBUTARY_COMMON_PROCESS_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tributary {

// The fields of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat line this file uses.
struct ProcStat {
  std::string name;          // comm, between the first '(' and the last ')'.
  uint64_t utime_ticks = 0;  // Field 14.
  uint64_t stime_ticks = 0;  // Field 15.
  uint64_t threads = 0;      // Field 20.
  uint64_t start_ticks = 0;  // Field 22: clock ticks after boot.
  uint64_t vsize_bytes = 0;  // Field 23.
  uint64_t rss_pages = 0;    // Field 24.
};

// Parses one stat line; INVALID_ARGUMENT naming what is missing. The name may hold
// spaces and parentheses (a thread can call itself anything): the fields start after
// the last ')'.
absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text);

// voluntary_ctxt_switches and nonvoluntary_ctxt_switches of a /proc/.../status file;
// INVALID_ARGUMENT when either is missing.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseContextSwitches(absl::string_view status);

// A thread name as a label value: printable ASCII kept, anything else '_', "" as "_".
std::string ThreadLabel(absl::string_view name);

class ProcessCollector : public prometheus::Collectable {
 public:
  struct Options {
    std::string proc_self = "/proc/self";  // stat, status, limits, fd/, task/<tid>/.
    std::string proc_stat = "/proc/stat";  // Its btime line: the boot time.
    // Distinct thread names with series of their own; later names count as "other".
    int max_thread_names = 64;
  };
  ProcessCollector() : ProcessCollector(Options()) {}
  explicit ProcessCollector(Options options);

  // Reads /proc now. A file that cannot be read leaves its families out (logged once),
  // so /metrics keeps answering. Thread counters never go down: a thread that ended
  // keeps what it was last seen to use under its name; one that was renamed keeps its
  // time so far under the old name. A thread that starts and ends between two reads is
  // not seen (process_cpu_seconds_total still counts it).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Seen {
    std::string name;
    // Its figures when it took that name (0 when first seen) and at the last read.
    uint64_t base_ticks = 0, base_voluntary = 0, base_involuntary = 0;
    uint64_t ticks = 0, voluntary = 0, involuntary = 0;
    bool present = false;
  };
  struct Totals {
    uint64_t ticks = 0, voluntary = 0, involuntary = 0;
  };
  std::string NameFor(absl::string_view name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Retire(const Seen& seen) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddThreads(std::vector<prometheus::MetricFamily>& families) const;

  const Options options_;
  const double ticks_per_second_;
  const double page_bytes_;
  mutable absl::Mutex mu_;
  // By (tid, start ticks): a reused tid is another thread.
  mutable std::map<std::pair<uint64_t, uint64_t>, Seen> threads_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, Totals> retired_ ABSL_GUARDED_BY(mu_);
  mutable bool warned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PROCESS_METRICS_H_
