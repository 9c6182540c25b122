// Runs the single-process trainer (//worker:train_local) as a child on a job spec and
// reads what it prints: the data loading time, each evaluation with its time since
// training started, and the final JSON summary.
#ifndef TRIBUTARY_BENCH_COMMON_TRAIN_LOCAL_RUN_H_
#define TRIBUTARY_BENCH_COMMON_TRAIN_LOCAL_RUN_H_

#include <string>

#include "absl/status/statusor.h"
#include "bench/common/training_run.h"

namespace tributary::bench {

struct TrainLocalOptions {
  std::string binary;    // //worker:train_local.
  std::string job_json;  // Given as --job_json.
  std::string log_path;  // Its output.
  std::string name = "train_local";
  int replicas = 1;  // --replicas (in-process replicas the batch is split over).
  int threads = 0;   // --threads (0: all cores).
};

// Waits for it to exit. UNAVAILABLE with the tail of its output when it fails;
// NOT_FOUND / INVALID_ARGUMENT when its output lacks what is parsed.
absl::StatusOr<TrainingRun> RunTrainLocal(const TrainLocalOptions& options);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_TRAIN_LOCAL_RUN_H_
