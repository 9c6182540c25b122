// `tributary status [--json]`: the cluster and its job.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"
#include "cli/job_progress.h"

namespace tributary::cli {

int RunStatus() {
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags(/*control=*/false);
  if (!client.ok()) return UsageError(client.status());
  absl::StatusOr<v1::ClusterStatus> status = client->ClusterStatus();
  if (!status.ok()) return Fail(status.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(*status) << "\n";
    return 0;
  }
  if (status->has_job()) {
    std::cout << status->job().job_id() << " "
              << ProgressLine(status->job(), TrainingSeconds(status->job())) << "\n";
    if (!status->job().state_reason().empty()) {
      std::cout << "  " << status->job().state_reason() << "\n";
    }
  } else {
    std::cout << "no job\n";
  }
  if (!status->waiting_reason().empty()) {
    std::cout << "waiting: " << status->waiting_reason() << "\n";
  }
  std::cout << "generation " << status->generation() << ", " << status->nodes_size()
            << " node(s), " << status->idle_workers_size() << " idle worker(s), "
            << status->shards_size() << "/" << status->expected_shards() << " PS shard(s)\n";
  for (const v1::NodeInfo& node : status->nodes()) {
    for (const v1::WorkerInfo& worker : node.workers()) {
      std::cout << absl::StrFormat("  %-12s %-10s rank %u  step %llu  %.0f samples/s%s\n",
                                   worker.worker_id(), node.node_name(),
                                   worker.assignment().global_rank(),
                                   static_cast<unsigned long long>(worker.step()),
                                   worker.samples_per_second(),
                                   worker.straggler() ? "  STRAGGLER" : "");
    }
  }
  return 0;
}

}  // namespace tributary::cli
