// Fills a CpuSnapshot (cpu_window.h) from the processes' parsed /metrics. Test-only like
// the strict parser it reads (//common/testing:prometheus_text), and so are the
// benchmarks that use it.
#ifndef TRIBUTARY_BENCH_COMMON_CPU_READING_H_
#define TRIBUTARY_BENCH_COMMON_CPU_READING_H_

#include <string>

#include "bench/common/cpu_window.h"
#include "common/testing/prometheus_text.h"

namespace tributary::bench {

// Adds one process's /metrics to the reading: process_cpu_seconds_total,
// tributary_thread_cpu_seconds_total by thread, the context switches, and for a
// "worker" its tributary_worker_step_seconds_count.
void AddProcess(const std::string& kind, const testing::ParsedMetrics& metrics,
                CpuSnapshot& snapshot);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_CPU_READING_H_
