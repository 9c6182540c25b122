// The machine a benchmark ran on, printed at the start of every benchmark and kept in
// its JSON line: figures from a shared, loaded machine are read with its load.
#ifndef TRIBUTARY_BENCH_COMMON_MACHINE_H_
#define TRIBUTARY_BENCH_COMMON_MACHINE_H_

#include <string>

namespace tributary::bench {

struct MachineInfo {
  unsigned cpu_cores = 0;              // std::thread::hardware_concurrency().
  std::string cpu_model;               // /proc/cpuinfo "model name"; empty when unknown.
  double memory_gib = 0;               // /proc/meminfo MemTotal.
  double load_average[3] = {0, 0, 0};  // 1, 5 and 15 minutes, at the time of the call.
};

MachineInfo DescribeMachine();

// "2 CPU cores (AMD EPYC 7B13), 23.4 GiB, load average 1.20 0.67 0.69".
std::string MachineLine(const MachineInfo& machine);

// JSON members (no braces): "cpu_cores": 2, "cpu_model": "...", "memory_gib": 23.4,
// "load_average": [1.2, 0.67, 0.69].
std::string MachineJsonMembers(const MachineInfo& machine);
// The same, then "load_average_after": [...] from `after` (taken when the runs ended).
std::string MachineJsonMembers(const MachineInfo& machine, const MachineInfo& after);

// "load average after the runs: 1.20 0.67 0.69".
std::string LoadAverageAfterLine(const MachineInfo& after);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_MACHINE_H_
