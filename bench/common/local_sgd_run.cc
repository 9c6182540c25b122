#include "bench/common/local_sgd_run.h"

#include <cstdio>

#include "absl/flags/flag.h"

ABSL_FLAG(bool, local_sgd, true,
          "Cluster: also run the job in LOCAL_SGD mode (plain averaging every "
          "--local_sgd_sync_every steps), unless the job's mode is LOCAL_SGD already. "
          "Default: true.");
ABSL_FLAG(uint32_t, local_sgd_sync_every, 0,
          "Cluster, LOCAL_SGD run: steps between synchronizations; 0 = the job default (8). "
          "Default: 0.");

namespace tributary::bench {

absl::StatusOr<std::optional<TrainingRun>> RunLocalSgdIfAsked(const TributaryLocalOptions& options,
                                                              const v1::JobSpec& spec,
                                                              const std::string& work_dir,
                                                              v1::JobSpec* local_sgd_spec) {
  if (!absl::GetFlag(FLAGS_local_sgd) || spec.mode() == v1::LOCAL_SGD) return std::nullopt;
  std::printf("running tributary local in LOCAL_SGD ...\n");
  std::fflush(stdout);
  absl::StatusOr<TrainingRun> run = RunLocalSgdVariant(
      options, spec, absl::GetFlag(FLAGS_local_sgd_sync_every), work_dir, local_sgd_spec);
  if (!run.ok()) return run.status();
  return std::optional<TrainingRun>(*std::move(run));
}

}  // namespace tributary::bench
