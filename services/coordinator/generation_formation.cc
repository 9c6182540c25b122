#include "services/coordinator/generation_formation.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/issued_credentials.h"
#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

bool Contains(const std::vector<uint32_t>& list, uint32_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

absl::Status GenerationFormation::ReadStatuses(const FormationInput& input,
                                               std::vector<v1::ShardStatus>& statuses,
                                               bool empty_stays_empty) {
  std::vector<v1::ShardStatus> now(input.shards.size());
  for (size_t i = 0; i < input.shards.size(); ++i) {
    const v1::ShardInfo& shard = input.shards[i];
    absl::StatusOr<v1::ShardStatus> status = shards_.GetShardStatus(shard);
    if (!status.ok()) return status.status();
    status->set_shard_index(shard.shard_index());
    if (!status->job_id().empty() && status->job_id() != input.job_id) {
      // A job this coordinator no longer runs (it ended while the shard was away, or a
      // coordinator without --state_dir forgot it): free the shard for the active one.
      absl::Status ended = shards_.EndJob(shard, status->job_id());
      if (!ended.ok() && !absl::IsNotFound(ended)) {
        return absl::FailedPreconditionError(
            absl::StrCat("PS shard ", shard.shard_index(), " at ", shard.address(),
                         " holds job ", status->job_id(), " and did not end it: ",
                         ended.message()));
      }
      status->clear_job_id();
    }
    if (empty_stays_empty && i < statuses.size() && statuses[i].job_id().empty()) {
      status->clear_job_id();
    }
    now[i] = *std::move(status);
  }
  statuses = std::move(now);
  return absl::OkStatus();
}

absl::Status GenerationFormation::RestoreFromEarlierJob(const FormationInput& input) {
  v1::RestoreJobRequest request;
  request.set_job_id(input.job_id);
  *request.mutable_job() = input.spec;
  request.set_from_job_id(input.spec.resume_from());
  request.set_num_nodes(input.num_nodes);
  request.set_num_shards(static_cast<uint32_t>(input.shards.size()));
  request.set_list_only(true);
  // The steps every shard holds an intact checkpoint of; the newest of them.
  std::optional<std::set<uint64_t>> common;
  std::vector<std::string> held;
  for (const v1::ShardInfo& shard : input.shards) {
    absl::StatusOr<v1::RestoreJobResponse> listed = shards_.RestoreJob(shard, request);
    if (!listed.ok()) return listed.status();
    const std::set<uint64_t> steps(listed->steps().begin(), listed->steps().end());
    held.push_back(absl::StrCat("shard ", shard.shard_index(), ": ",
                                steps.empty() ? std::string("none") : absl::StrJoin(steps, ",")));
    if (!common.has_value()) {
      common = steps;
    } else {
      std::set<uint64_t> both;
      for (uint64_t step : steps) {
        if (common->count(step) > 0) both.insert(step);
      }
      common = std::move(both);
    }
  }
  if (!common.has_value() || common->empty()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", input.job_id, " resumes job ", input.spec.resume_from(),
        ", but no step has an intact checkpoint of it on every PS shard (",
        absl::StrJoin(held, "; "),
        "); its checkpoints must be in this job's checkpoint directory"));
  }
  request.set_list_only(false);
  request.set_step(*common->rbegin());
  for (const v1::ShardInfo& shard : input.shards) {
    absl::StatusOr<v1::RestoreJobResponse> restored = shards_.RestoreJob(shard, request);
    if (!restored.ok()) return restored.status();
  }
  if (input.note) {
    input.note(absl::StrCat("resumes job ", input.spec.resume_from(),
                            " from its checkpoint of step ", request.step(),
                            " on every PS shard"));
  }
  return absl::OkStatus();
}

absl::Status GenerationFormation::Fence(const FormationInput& input, uint64_t generation,
                                        const std::vector<uint32_t>& holding) {
  for (const v1::ShardInfo& shard : input.shards) {
    if (!Contains(holding, shard.shard_index())) continue;
    v1::BeginGenerationRequest request;
    request.set_job_id(input.job_id);
    request.set_generation(generation);
    request.set_num_nodes(input.num_nodes);
    request.set_fence(true);
    absl::StatusOr<v1::BeginGenerationResponse> fenced = shards_.BeginGeneration(shard, request);
    if (!fenced.ok()) {
      return absl::Status(fenced.status().code(),
                          absl::StrCat("fencing for generation ", generation, " on PS shard ",
                                       shard.shard_index(), " at ", shard.address(), ": ",
                                       fenced.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> GenerationFormation::Begin(const FormationInput& input,
                                                                 uint64_t generation,
                                                                 const ResumePoint& resume) {
  std::vector<std::string> digests;  // What the shards check each node against.
  if (input.node_credential) {
    for (uint32_t rank = 0; rank < input.num_nodes; ++rank) {
      digests.push_back(CredentialDigest(input.node_credential(generation, rank)));
    }
  }
  std::vector<uint32_t> installing;
  for (const v1::ShardInfo& shard : input.shards) {
    v1::BeginGenerationRequest request;
    request.set_job_id(input.job_id);
    request.set_generation(generation);
    request.set_num_nodes(input.num_nodes);
    request.set_resume_step(resume.step);
    for (const std::string& digest : digests) request.add_node_credential_sha256(digest);
    absl::StatusOr<v1::BeginGenerationResponse> begun = shards_.BeginGeneration(shard, request);
    if (begun.ok()) continue;
    // A shard holding no job yet refuses: the workers' InitPartitions installs it.
    if (absl::IsFailedPrecondition(begun.status()) && Contains(resume.empty, shard.shard_index()) &&
        resume.step == 0) {
      installing.push_back(shard.shard_index());
      continue;
    }
    return absl::Status(begun.status().code(),
                        absl::StrCat("BeginGeneration(generation ", generation, ", resume step ",
                                     resume.step, ") on PS shard ", shard.shard_index(), " at ",
                                     shard.address(), ": ", begun.status().message()));
  }
  return installing;
}

absl::StatusOr<FormedGeneration> GenerationFormation::Form(const FormationInput& input) {
  // 1. Where the shards stand: the resume step and the newest generation they saw.
  std::vector<v1::ShardStatus> statuses;
  if (absl::Status read = ReadStatuses(input, statuses, false); !read.ok()) return read;

  // 1b. A resumed job that never formed, on shards of which some hold nothing of it
  // (none, or a restore that failed part way; a shard that installed the checkpoint
  // already lists just that step and keeps it).
  const bool never_formed =
      std::all_of(statuses.begin(), statuses.end(), [&](const v1::ShardStatus& status) {
        return status.job_id() != input.job_id || status.generation() == 0;
      });
  const bool some_empty = std::any_of(statuses.begin(), statuses.end(),
                                      [](const v1::ShardStatus& s) { return s.job_id().empty(); });
  if (!input.spec.resume_from().empty() && never_formed && some_empty) {
    if (absl::Status restored = RestoreFromEarlierJob(input); !restored.ok()) return restored;
    if (absl::Status read = ReadStatuses(input, statuses, false); !read.ok()) return read;
  }
  absl::StatusOr<ResumePoint> resume = ResumePointOf(input.job_id, statuses);
  if (!resume.ok()) return resume.status();

  // 2. A generation number nobody has seen, reserved before any shard hears of it.
  FormedGeneration formed;
  formed.number = input.reserve_generation(resume->newest_generation);

  // 2b. Fence, then read the steps the resume step comes from again.
  if (!resume->holding.empty()) {
    if (absl::Status fenced = Fence(input, formed.number, resume->holding); !fenced.ok()) {
      return fenced;
    }
    if (absl::Status read = ReadStatuses(input, statuses, true); !read.ok()) return read;
    resume = ResumePointOf(input.job_id, statuses);
    if (!resume.ok()) return resume.status();
  }
  formed.resume_step = resume->step;
  formed.from_scratch = resume->holding.empty();
  formed.held_cut = resume->cut;
  // A cut the job names (a job stored before cuts existed names none: the even cut).
  const v1::PartitionCut asked = StoredPartitionCut(input.spec);
  if (formed.held_cut.has_value() && input.spec.partition_cut() != v1::CUT_AUTO &&
      asked != *formed.held_cut) {
    return absl::FailedPreconditionError(
        absl::StrCat("the PS shards hold job ", input.job_id, " planned with partition_cut ",
                     v1::PartitionCut_Name(*formed.held_cut), ", its spec says ",
                     v1::PartitionCut_Name(asked), ": the workers' plan would not match theirs"));
  }

  // 3. Every shard learns the generation before any worker does.
  absl::StatusOr<std::vector<uint32_t>> installing = Begin(input, formed.number, *resume);
  if (!installing.ok()) return installing.status();
  formed.installing = *std::move(installing);
  return formed;
}

}  // namespace tributary::coordinator
