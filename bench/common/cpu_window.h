// Where the machine's cores went while a local cluster trained: the CPU time of every
// process of the cluster (workers, PS shards, the coordinator) and of their threads by
// name (process_cpu_seconds_total and tributary_thread_cpu_seconds_total from their
// /metrics), their context switches, and the whole machine's /proc/stat, between two
// readings taken while the job ran; per job step. It tells a step that waits because
// the cores are full from one that waits on hand-offs while cores sit idle.
#ifndef TRIBUTARY_BENCH_COMMON_CPU_WINDOW_H_
#define TRIBUTARY_BENCH_COMMON_CPU_WINDOW_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tributary::bench {

// The first line of /proc/stat: the machine's CPU time in clock ticks, every core.
struct MachineTicks {
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
           steal = 0;
  uint64_t Total() const { return user + nice + system + idle + iowait + irq + softirq + steal; }
};

// Parses /proc/stat's "cpu ..." line; INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<MachineTicks> ParseMachineTicks(absl::string_view proc_stat);
// This machine's, now; nullopt when /proc/stat cannot be read.
std::optional<MachineTicks> ReadMachineTicks();

// One reading of the cluster: every process's /metrics at about the same time
// (AddProcess, bench/common/cpu_reading.h, adds each).
struct CpuSnapshot {
  absl::Time at;
  // tributary_worker_step_seconds_count summed over the workers read.
  uint64_t worker_steps = 0;
  std::map<std::string, int> processes;  // Read, by kind ("worker", "shard", "coordinator").
  std::map<std::string, double> process_seconds;  // process_cpu_seconds_total by kind.
  // tributary_thread_cpu_seconds_total by (kind, thread name), summed over the kind's
  // processes.
  std::map<std::pair<std::string, std::string>, double> thread_seconds;
  double voluntary = 0, involuntary = 0;  // Context switches, every thread read.
  std::optional<MachineTicks> machine;
};

// What was spent between two readings.
struct CpuUse {
  double seconds = 0;    // Wall time between the readings.
  double job_steps = 0;  // Worker steps over the workers: each runs every SYNC step.
  unsigned cores = 0;
  std::map<std::string, double> process_seconds;  // By kind.
  std::map<std::pair<std::string, std::string>, double> thread_seconds;
  double voluntary = 0, involuntary = 0;
  // Shares of the machine's time over the window (all cores); negative when unread.
  double machine_busy = -1, machine_user = -1, machine_system = -1, machine_idle = -1;

  bool measured() const { return job_steps > 0; }
  double PerStepMs(double seconds_spent) const {
    return job_steps > 0 ? 1000 * seconds_spent / job_steps : 0;
  }
  double ProcessesSeconds() const;  // Every kind's together.
};

// FAILED_PRECONDITION when the two readings did not see the same processes, or no step
// ran between them.
absl::StatusOr<CpuUse> CpuBetween(const CpuSnapshot& first, const CpuSnapshot& last,
                                  unsigned cores);

// The printed block: CPU per job step by kind, each kind's busiest threads (at most
// `threads` of them, the rest as "other"), all processes against the cores' time per
// step, the machine's busy and idle shares, context switches per step.
std::string CpuUseLines(const CpuUse& use, int threads = 4);

// A JSON object with the same figures (ms per job step, shares).
std::string CpuUseJson(const CpuUse& use);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_CPU_WINDOW_H_
