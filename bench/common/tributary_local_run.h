// Runs `tributary local` (the real coordinator, PS shard and worker binaries) as a
// child for one job and watches it from outside: the coordinator's job record over
// gRPC (when training started and ended, the accuracy curve), every worker's /metrics
// histograms (step, PS wait and reduction time), and the summary JSON the CLI writes.
#ifndef TRIBUTARY_BENCH_COMMON_TRIBUTARY_LOCAL_RUN_H_
#define TRIBUTARY_BENCH_COMMON_TRIBUTARY_LOCAL_RUN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/common/training_run.h"
#include "proto/job.pb.h"

namespace tributary::bench {

struct TributaryLocalOptions {
  std::string binary;                    // //cli:tributary.
  std::string job_json;                  // Given as --job_json.
  std::string run_dir;                   // --run_dir: every process's log; created.
  std::string name = "tributary local";  // The run's column title.
  int workers = 2;
  int ps_shards = 2;
  int nodes = 0;                        // --nodes (0: one node per worker).
  std::vector<std::string> extra_args;  // Further flags for `tributary local`.
  // Also read the PS shards' /metrics (their optimizer apply time, how long the nodes'
  // pushes waited for the slowest), as often as the workers'; off by default: a
  // benchmark of throughput adds no load it does not need.
  bool scrape_shards = false;
  // Also read the coordinator's /metrics, and account the CPU of every process of the
  // cluster and of the machine between the first reading after the workers' first
  // step and the last one while the job ran (TrainingRun::cpu); needs scrape_shards.
  bool account_cpu = false;
  // How often the coordinator's job record is read, and the workers' /metrics.
  absl::Duration job_poll_interval = absl::Milliseconds(250);
  absl::Duration metrics_poll_interval = absl::Milliseconds(500);
  // The coordinator's --heartbeat_interval: the workers' reports (step, accuracy)
  // reach the job record this often, which bounds the timing resolution.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
};

// Waits for the child to exit. UNAVAILABLE with the tail of its log when it fails or
// the job does not complete; NOT_FOUND when the job never appeared on the coordinator.
absl::StatusOr<TrainingRun> RunTributaryLocal(const TributaryLocalOptions& options);

// The same cluster on `spec` in LOCAL_SGD (sync_every 0: the job default), its job
// JSON and run directory under `work_dir`; the run is named "local SGD H=<n>". The
// spec it ran is written to *local_sgd_spec.
absl::StatusOr<TrainingRun> RunLocalSgdVariant(const TributaryLocalOptions& options,
                                               const v1::JobSpec& spec, uint32_t sync_every,
                                               const std::string& work_dir,
                                               v1::JobSpec* local_sgd_spec);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_TRIBUTARY_LOCAL_RUN_H_
