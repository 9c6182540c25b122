#include "services/coordinator/cluster_status_view.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/proto_time.h"

namespace tributary::coordinator {

void FillWaitingReason(v1::Job& job, bool generation_active, const std::string& waiting_reason,
                       const std::string& unreachable_shards) {
  // At most one job is not terminal: the active one.
  if (IsTerminal(job.state()) || job.state() == v1::PAUSED) return;
  if (!generation_active) {
    job.set_waiting_reason(waiting_reason);
  } else if (!unreachable_shards.empty()) {
    job.set_waiting_reason(
        absl::StrCat(unreachable_shards, ": training waits until it answers again"));
  }
}

double StragglerThreshold(std::vector<double> step_times, double factor) {
  if (step_times.size() < 2) return 0;
  std::sort(step_times.begin(), step_times.end());
  return factor * step_times[(step_times.size() - 1) / 2];
}

v1::ClusterStatus ClusterStatusOf(const StatusInputs& inputs, absl::Time now) {
  const Generation& generation = *inputs.generation;
  const WorkerRegistry& workers = *inputs.workers;
  v1::ClusterStatus status;
  *status.mutable_now() = ToProto(now);
  status.set_coordinator_version(inputs.version);
  const v1::Job* shown = inputs.jobs->Shown();
  if (shown != nullptr) {
    *status.mutable_job() = *shown;
    FillWaitingReason(*status.mutable_job(), generation.active, inputs.waiting_reason,
                      inputs.shards->UnreachableNote());
  }
  status.set_generation(generation.active ? generation.number : 0);

  std::vector<double> step_times;
  for (const auto& [id, assignment] : generation.assignments) {
    const WorkerRecord* worker = workers.Find(id);
    if (worker != nullptr && worker->report.step_seconds() > 0) {
      step_times.push_back(worker->report.step_seconds());
    }
  }
  const double threshold = StragglerThreshold(std::move(step_times), inputs.straggler_factor);
  if (generation.active) {
    for (uint32_t rank = 0; rank < generation.node_names.size(); ++rank) {
      v1::NodeInfo* node = status.add_nodes();
      node->set_node_name(generation.node_names[rank]);
      node->set_node_rank(rank);
      node->set_rendezvous_id(generation.rendezvous_ids[rank]);
      std::vector<std::pair<uint32_t, std::string>> members;
      for (const auto& [id, assignment] : generation.assignments) {
        if (assignment.node_rank() == rank) members.push_back({assignment.local_rank(), id});
      }
      std::sort(members.begin(), members.end());
      for (const auto& [local_rank, id] : members) {
        const WorkerRecord* worker = workers.Find(id);
        if (worker == nullptr) continue;
        v1::WorkerInfo* info = node->add_workers();
        *info = WorkerInfoOf(*worker, &generation.assignments.at(id), now);
        info->set_straggler(threshold > 0 && info->step_seconds() > threshold);
      }
    }
  }
  for (const WorkerRecord* worker : workers.BySequence()) {
    if (generation.active && generation.assignments.count(worker->id) > 0) continue;
    *status.add_idle_workers() = WorkerInfoOf(*worker, nullptr, now);
  }
  for (const v1::ShardSummary& summary : inputs.shards->Summaries()) {
    *status.add_shards() = summary;
  }
  status.set_expected_shards(inputs.shards->expected());
  if (shown != nullptr && shown->state() == v1::PAUSED) {
    status.set_waiting_reason(absl::StrCat("job ", shown->job_id(), " is paused"));
  } else if (!generation.active && shown != nullptr && !IsTerminal(shown->state())) {
    status.set_waiting_reason(inputs.waiting_reason);
  } else if (shown == nullptr) {
    status.set_waiting_reason("no job submitted");
  }
  return status;
}

}  // namespace tributary::coordinator
