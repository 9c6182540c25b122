#include "services/coordinator/generation_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/coordinator/worker_registry.h"

namespace tributary::coordinator {
namespace {

std::string Seconds(absl::Duration duration) {
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(duration));
}

}  // namespace

FormationDecision GenerationPlanner::Decide(const FormationInputs& inputs, absl::Time now) {
  FormationDecision decision;
  const v1::Job* job = inputs.job;
  if (job == nullptr) {
    waiting_reason_ = "no active job: submit one with SubmitJob";
    settle_since_.reset();
    return decision;
  }
  if (job->state() == v1::PAUSED) {
    waiting_reason_ = absl::StrCat("job ", job->job_id(), " is paused");
    settle_since_.reset();
    return decision;
  }
  const v1::JobSpec& spec = job->spec();
  decision.plan = PlanGeneration(spec, inputs.candidates);
  const GenerationPlan& plan = decision.plan;

  if (inputs.running != nullptr) {
    // Scale-up: a worker that would enlarge the generation (a new node within
    // nodes_max, or one more worker on a node) re-forms it once it has been around
    // for the settle window, so that a returning worker is not left idle.
    const auto& current = inputs.running->assignments;
    bool grows = plan.assignments.size() > current.size();
    for (const auto& [id, assignment] : current) {
      if (plan.assignments.count(id) == 0) grows = false;
    }
    if (!grows) {
      scale_up_since_.reset();
      waiting_reason_.clear();
      return decision;
    }
    if (!scale_up_since_) scale_up_since_ = now;
    if (now - *scale_up_since_ < settle_window_) return decision;
    std::vector<std::string> joining;
    for (const Candidate& candidate : inputs.candidates) {
      if (plan.assignments.count(candidate.worker_id) > 0 &&
          current.count(candidate.worker_id) == 0) {
        joining.push_back(DescribeWorker(candidate.worker_id, candidate.registration));
      }
    }
    scale_up_since_.reset();
    // Settled already: the next Decide forms the larger generation at once.
    settle_since_ = now - settle_window_;
    decision.action = FormationDecision::Action::kEndForScaleUp;
    decision.reason =
        absl::StrCat(absl::StrJoin(joining, ", "), " joined; re-forming with ",
                     plan.assignments.size(), " workers on ", plan.node_names.size(), " node(s)");
    return decision;
  }
  if (now < retry_at_) {
    waiting_reason_ =
        absl::StrCat(formation_error_, " (retrying in ", Seconds(retry_at_ - now), ")");
    return decision;
  }
  if (!inputs.missing_shards.empty()) {
    waiting_reason_ = absl::StrCat(
        "waiting for PS shards: ", inputs.expected_shards - inputs.missing_shards.size(), " of ",
        inputs.expected_shards, " registered (missing shard index ",
        absl::StrJoin(inputs.missing_shards, ", "), ")");
    return decision;
  }
  if (plan.node_names.size() < spec.nodes_min()) {
    settle_since_.reset();
    waiting_reason_ =
        absl::StrCat("waiting for nodes: ", plan.node_names.size(),
                     " of nodes_min=", spec.nodes_min(), " node group(s) can be assigned");
    std::vector<std::string> notes;
    for (const auto& [id, left_out] : plan.left_out) {
      if (left_out.kind != LeftOut::Kind::kNodeNotAdmitted) notes.push_back(left_out.reason);
    }
    notes.insert(notes.end(), inputs.failed_workers.begin(), inputs.failed_workers.end());
    if (!notes.empty()) absl::StrAppend(&waiting_reason_, "; ", absl::StrJoin(notes, "; "));
    return decision;
  }
  if (!settle_since_) settle_since_ = now;
  if (plan.node_names.size() < spec.nodes_max() && now - *settle_since_ < settle_window_) {
    waiting_reason_ = absl::StrCat(
        "settling: ", plan.node_names.size(), " of nodes_max=", spec.nodes_max(),
        " node group(s) present; forming in ", Seconds(*settle_since_ + settle_window_ - now));
    return decision;
  }
  waiting_reason_ = absl::StrCat("forming generation ", inputs.next_generation);
  decision.action = FormationDecision::Action::kForm;
  return decision;
}

void GenerationPlanner::FormationFailed(const std::string& reason, absl::Time now) {
  if (!failing_since_.has_value()) failing_since_ = now;
  formation_error_ = reason;
  waiting_reason_ = reason;
  retry_at_ = now + formation_retry_;
}

void GenerationPlanner::Formed() {
  failing_since_.reset();
  settle_since_.reset();
  scale_up_since_.reset();
  formation_error_.clear();
  waiting_reason_.clear();
}

void GenerationPlanner::JobSubmitted() {
  failing_since_.reset();
  settle_since_.reset();
  retry_at_ = absl::InfinitePast();
  formation_error_.clear();
}

void GenerationPlanner::RestartSettling() {
  failing_since_.reset();
  settle_since_.reset();
  scale_up_since_.reset();
}

absl::StatusOr<ResumePoint> ResumePointOf(const std::string& job_id,
                                          const std::vector<v1::ShardStatus>& statuses) {
  ResumePoint point;
  uint64_t resume_step = UINT64_MAX;
  for (const v1::ShardStatus& status : statuses) {
    point.newest_generation = std::max(point.newest_generation, status.generation());
    if (status.job_id() == job_id) {
      point.holding.push_back(status.shard_index());
      resume_step = std::min(resume_step, status.step());
      if (status.partition_cut() == v1::PARTITION_CUT_UNSPECIFIED) continue;
      if (point.cut.has_value() && *point.cut != status.partition_cut()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the PS shards hold job ", job_id, " under different partition cuts (",
                         v1::PartitionCut_Name(*point.cut), " and, on shard ", status.shard_index(),
                         ", ", v1::PartitionCut_Name(status.partition_cut()),
                         "): restart the shards from checkpoints of one run, or stop the job"));
      }
      point.cut = status.partition_cut();
    } else {
      point.empty.push_back(status.shard_index());
    }
  }
  point.step = point.holding.empty() ? 0 : resume_step;
  if (point.step > 0 && !point.empty.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PS shard(s) ", absl::StrJoin(point.empty, ", "), " hold no state of job ", job_id,
        " while shard(s) ", absl::StrJoin(point.holding, ", "), " stand at step ", point.step,
        " or later: restart the empty shard(s) with their checkpoint directory, or stop the job"));
  }
  return point;
}

}  // namespace tributary::coordinator
