// The LOCAL_SGD second run of the benchmarks that compare the cluster (time_to_accuracy,
// vs_ddp, step_breakdown), and its flags --local_sgd and --local_sgd_sync_every.
#ifndef TRIBUTARY_BENCH_COMMON_LOCAL_SGD_RUN_H_
#define TRIBUTARY_BENCH_COMMON_LOCAL_SGD_RUN_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bench/common/training_run.h"
#include "bench/common/tributary_local_run.h"
#include "proto/job.pb.h"

namespace tributary::bench {

// With --local_sgd (the default) and a job not in LOCAL_SGD already: the same cluster
// on the job in LOCAL_SGD every --local_sgd_sync_every steps (RunLocalSgdVariant), its
// spec in *local_sgd_spec; nullopt when not asked for.
absl::StatusOr<std::optional<TrainingRun>> RunLocalSgdIfAsked(const TributaryLocalOptions& options,
                                                              const v1::JobSpec& spec,
                                                              const std::string& work_dir,
                                                              v1::JobSpec* local_sgd_spec);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_LOCAL_SGD_RUN_H_
