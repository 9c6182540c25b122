// How many cores this process may really use: the machine's, cut to the CPUs it may
// run on (sched_getaffinity: taskset, cpusets) and to its cgroup's CPU quota (a
// container's CPU limit: cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us).
// std::thread::hardware_concurrency() sees only the first: a worker in a pod limited
// to 2 CPUs on a 64-core node would otherwise start 64 compute threads and be
// throttled.
#ifndef TRIBUTARY_COMMON_USABLE_CORES_H_
#define TRIBUTARY_COMMON_USABLE_CORES_H_

#include <optional>
#include <string>

namespace tributary {

// At least 1.
int UsableCores();

// The parts, for tests: the CPUs a quota allows (rounded up), from the contents of a
// cgroup v2 cpu.max ("max 100000" = none, "200000 100000" = 2) or of v1's quota and
// period files ("-1" = none); nullopt when there is no limit or the text is malformed.
std::optional<int> CoresOfCpuMax(const std::string& cpu_max);
std::optional<int> CoresOfCfsQuota(const std::string& quota_us, const std::string& period_us);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_USABLE_CORES_H_
