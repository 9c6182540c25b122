// The engine's compute-only throughput: forward+backward of one replica on one device
// with nothing else (no data loading, no reduction, no parameter server), the ceiling a
// training run on that device is measured against. engine_bench prints it for every
// registered model; step_breakdown for the job it runs, in the same run.
#ifndef TRIBUTARY_BENCH_COMMON_COMPUTE_ONLY_H_
#define TRIBUTARY_BENCH_COMMON_COMPUTE_ONLY_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/model.h"

namespace tributary::bench {

// Seconds per call of fn: the best of 5 windows of min_seconds / 5 each (after one
// warm-up call), so a burst of load from other processes on a shared machine spoils
// one window rather than the figure.
template <typename Fn>
double TimePerCall(Fn fn, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  fn();
  double best = 1e300;
  for (int window = 0; window < 5; ++window) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds / 5);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

struct ComputeOnly {
  std::string device;  // The replica's: "cpu", "cuda:0".
  int batch = 0;
  double samples_per_second = 0;
};

// Forward+backward of `model` at `batch` samples (random features in [0, 1), random
// labels) on one replica of `device` ("cpu" or "gpu"; the CPU one multiplies on the
// threads SetCpuMatmulThreads allows), timed with TimePerCall.
absl::StatusOr<ComputeOnly> MeasureComputeOnly(const engine::ModelDef& model,
                                               const std::string& device, int batch,
                                               double min_seconds);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_COMPUTE_ONLY_H_
