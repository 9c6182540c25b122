#include "services/coordinator/coordinator.h"

#include <glog/logging.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/issued_credentials.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "common/random_hex.h"
#include "services/coordinator/history_file.h"

namespace tributary::coordinator {
namespace {

// Ended generations remembered so that a worker still acting in one learns why.
constexpr size_t kEndedGenerationsKept = 64;

HistoryLimits HistoryLimitsOf(const CoordinatorOptions& options) {
  HistoryLimits limits;
  limits.max_points = options.history_points;
  limits.max_worker_points = options.history_worker_points;
  limits.straggler_factor = options.straggler_factor;
  return limits;
}

}  // namespace
Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock, ShardClient* shards)
    : options_(std::move(options)),
      clock_(clock),
      shard_client_(shards),
      rendezvous_(clock, options_.rendezvous),
      workers_(RandomHex(6)),
      jobs_(options_.max_events, options_.progress_history,
            [this](bool urgent) ABSL_NO_THREAD_SAFETY_ANALYSIS { MarkDirtyLocked(urgent); }),
      histories_(HistoryLimitsOf(options_)),
      shards_(options_.ps_shards),
      planner_(options_.settle_window, options_.formation_retry),
      failure_streak_(options_.max_generation_failures),
      snapshotter_(options_.state_dir, options_.state_save_interval, clock) {}

Coordinator::~Coordinator() = default;

absl::Status Coordinator::Start() {
  if (!snapshotter_.enabled()) return absl::OkStatus();
  absl::StatusOr<std::optional<StateFile::Loaded>> loaded = snapshotter_.Load();
  if (!loaded.ok()) return loaded.status();
  {
    absl::MutexLock lock(&mu_);
    if (loaded->has_value()) {
      const StateFile::Loaded& state = **loaded;
      if (!state.problem.empty()) LOG(ERROR) << state.problem;
      jobs_.Restore(state.state.next_job_number(),
                    std::vector<v1::Job>(state.state.jobs().begin(), state.state.jobs().end()));
      last_generation_ = state.state.last_generation();
      for (const v1::ShardInfo& info : state.state.shards()) shards_.Restore(info, clock_->Now());
      for (const v1::Job& job : jobs_.jobs()) {
        absl::StatusOr<v1::JobHistory> history =
            LoadHistoryFile(options_.state_dir, job.job_id());
        if (history.ok()) {
          histories_.Restore(*std::move(history));
        } else if (!absl::IsNotFound(history.status())) {
          LOG(WARNING) << "the history of job " << job.job_id()
                       << " starts again: " << history.status().message();
        }
      }
      LOG(INFO) << "coordinator state loaded from " << state.source << ": " << jobs_.jobs().size()
                << " job(s), " << state.state.shards_size() << " PS shard(s), last generation "
                << last_generation_;
      if (v1::Job* job = jobs_.Active()) {
        const std::string problem =
            state.problem.empty() ? "" : absl::StrCat(" (", state.problem, ")");
        if (job->state() == v1::RUNNING || job->state() == v1::RENDEZVOUS) {
          jobs_.Transition(
              *job, v1::RENDEZVOUS,
              absl::StrCat("coordinator restarted: generation ", job->generation(),
                           " ended with it; waiting for workers to register again", problem),
              clock_->Now());
        } else if (!problem.empty() || job->state() == v1::PAUSED) {
          jobs_.Transition(*job, job->state(), absl::StrCat("coordinator restarted", problem),
                           clock_->Now());
        }
      }
    }
    MarkDirtyLocked(true);
  }
  // Proves the directory is writable before the first job depends on it.
  return SaveState();
}

bool Coordinator::InGenerationLocked(const std::string& worker_id) const {
  return generation_.active && generation_.assignments.count(worker_id) > 0;
}

std::vector<ReportView> Coordinator::ReportViewsLocked() const {
  std::vector<ReportView> views;
  for (const auto& [id, assignment] : generation_.assignments) {
    const WorkerRecord* worker = workers_.Find(id);
    ReportView view;
    view.report = worker != nullptr && worker->reported ? &worker->report : nullptr;
    view.replicas = assignment.replicas();
    view.global_rank = assignment.global_rank();
    views.push_back(view);
  }
  return views;
}

// ---------------------------------------------------------------------------------
// Job endings

void Coordinator::FinishJobLocked(v1::Job& job, v1::JobState to, const std::string& reason) {
  if (JobHistory* history = histories_.Find(job.job_id())) {
    history->Finish(clock_->Now());
    histories_.MarkChanged(job.job_id(), true);
  }
  jobs_.Finish(job, to, reason, clock_->Now());
  if (generation_.active && generation_.job_id == job.job_id()) {
    DeactivateGenerationLocked(
        absl::StrCat("job ", job.job_id(), " ", v1::JobState_Name(to), ": ", reason));
  }
  jobs_to_end_.insert(job.job_id());
  next_end_job_attempt_ = absl::InfinitePast();
  planner_.RestartSettling();
  RequestWorkLocked();
}

void Coordinator::CompleteJobLocked(v1::Job& job) {
  JobHistory& history = histories_.For(job.job_id());
  history.Finish(clock_->Now());
  *job.mutable_result() =
      JobResultOf(job, ReportViewsLocked(), history.proto().bytes_pushed(),
                  history.proto().bytes_pulled(), clock_->Now());
  FinishJobLocked(job, v1::COMPLETED,
                  absl::StrCat("all ", generation_.assignments.size(), " worker(s) of generation ",
                               generation_.number, " finished: ", job.step(), " of ",
                               job.total_steps(), " steps"));
}

// ---------------------------------------------------------------------------------
// Generations

std::string Coordinator::JobOfGenerationLocked(uint64_t number) const {
  if (number == 0) return "";
  if (generation_.number == number) return generation_.job_id;
  auto ended = ended_.find(number);
  return ended == ended_.end() ? "" : ended->second.first;
}

void Coordinator::DeactivateGenerationLocked(const std::string& reason) {
  if (!generation_.active) return;
  generation_.active = false;
  generation_.end_reason = reason;
  for (const std::string& id : generation_.rendezvous_ids) {
    rendezvous_.Close(id, absl::StrCat("generation ", generation_.number, " ended: ", reason));
  }
  ended_[generation_.number] = {generation_.job_id, reason};
  while (ended_.size() > kEndedGenerationsKept) ended_.erase(ended_.begin());
  previous_generation_ = generation_;
  generation_ = Generation();
  RequestWorkLocked();
}

void Coordinator::EndGenerationLocked(const std::string& reason, const std::string& cause,
                                      bool worker_error) {
  if (!generation_.active) return;
  const uint64_t number = generation_.number;
  const uint64_t start_step = generation_.resume_step;
  const std::string job_id = generation_.job_id;
  ++counters_.generations_ended[cause];
  DeactivateGenerationLocked(reason);
  previous_generation_.ended_by_worker_error = worker_error;
  v1::Job* job = jobs_.Find(job_id);
  if (job == nullptr || IsTerminal(job->state())) return;
  const std::string event = absl::StrCat("generation ", number, " ended: ", reason);
  jobs_.Transition(*job, job->state() == v1::PAUSED ? v1::PAUSED : v1::RENDEZVOUS, event,
                   clock_->Now());
  const bool progressed = job->step() > start_step;
  if (std::optional<std::string> fail =
          failure_streak_.GenerationEnded(worker_error, progressed, reason)) {
    FinishJobLocked(*job, v1::FAILED, *fail);
  }
}

void Coordinator::RemoveWorkerLocked(const std::string& worker_id, const std::string& reason,
                                     const std::string& cause, bool worker_error) {
  if (InGenerationLocked(worker_id)) EndGenerationLocked(reason, cause, worker_error);
  workers_.Remove(worker_id);
  RequestWorkLocked();
}

void Coordinator::ApplySameErrorRuleLocked(const std::string& worker_id, uint64_t generation,
                                           const std::string& error) {
  v1::Job* job = jobs_.Active();
  if (job == nullptr) return;
  Generation* target = nullptr;
  if (generation_.number == generation && generation_.number != 0) target = &generation_;
  if (previous_generation_.number == generation && previous_generation_.number != 0) {
    target = &previous_generation_;
  }
  uint64_t number = 0;
  size_t size = 0;
  std::map<std::string, std::string> failures;
  if (target != nullptr && target->job_id == job->job_id() &&
      target->assignments.count(worker_id) > 0) {
    target->failures[worker_id] = error;
    number = target->number;
    size = target->assignments.size();
    failures = target->failures;
  }
  std::vector<std::optional<std::string>> registered;
  for (const auto& [id, worker] : workers_.all()) {
    registered.push_back(worker.failed_job == job->job_id() ? std::optional(worker.note)
                                                            : std::nullopt);
  }
  if (std::optional<std::string> fail =
          SameErrorEverywhere(number, size, failures, registered, error)) {
    FinishJobLocked(*job, v1::FAILED, *fail);
  }
}

std::optional<GenerationPlan> Coordinator::PlanFormationLocked(absl::Time now) {
  while (true) {
    v1::Job* job = jobs_.Active();
    FormationInputs inputs;
    inputs.job = job;
    inputs.running = generation_.active ? &generation_ : nullptr;
    inputs.missing_shards = shards_.Missing();
    inputs.expected_shards = options_.ps_shards;
    inputs.next_generation = last_generation_ + 1;
    if (job != nullptr) {
      inputs.candidates = workers_.Candidates(job->job_id());
      for (const auto& [id, worker] : workers_.all()) {
        if (worker.failed_job == job->job_id()) {
          inputs.failed_workers.push_back(
              absl::StrCat(DescribeWorker(id, worker.registration), " failed: ", worker.note));
        }
      }
    }
    FormationDecision decision = planner_.Decide(inputs, now);
    if (job != nullptr && job->state() != v1::PAUSED) {
      // What each idle worker is told.
      for (auto& [id, worker] : workers_.all()) {
        auto left_out = decision.plan.left_out.find(id);
        if (left_out != decision.plan.left_out.end()) {
          worker.note = left_out->second.reason;
        } else if (worker.failed_job != job->job_id()) {
          worker.note.clear();
        }
      }
    }
    switch (decision.action) {
      case FormationDecision::Action::kWait:
        return std::nullopt;
      case FormationDecision::Action::kForm:
        return std::move(decision.plan);
      case FormationDecision::Action::kEndForScaleUp:
        EndGenerationLocked(decision.reason, "scale_up", false);
        break;  // Decide again, now without a running generation.
    }
  }
}

void Coordinator::FormationFailed(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  LOG(WARNING) << "generation not formed: " << reason;
  ++counters_.formation_failures;
  const absl::Time now = clock_->Now();
  planner_.FormationFailed(reason, now);
  const absl::Duration failing = planner_.FailingFor(now);
  if (options_.formation_timeout <= absl::ZeroDuration() || failing < options_.formation_timeout) {
    return;
  }
  v1::Job* job = jobs_.Active();
  if (job == nullptr || IsTerminal(job->state())) return;
  FinishJobLocked(*job, v1::FAILED,
                  absl::StrCat("no generation could form for ", absl::FormatDuration(failing),
                               " (--formation_timeout=",
                               absl::FormatDuration(options_.formation_timeout), "): ", reason));
}

void Coordinator::FormGenerationIfDue() {
  FormationInput input;
  GenerationPlan plan;
  std::map<std::string, uint64_t> worker_sequences;
  {
    absl::MutexLock lock(&mu_);
    std::optional<GenerationPlan> due = PlanFormationLocked(clock_->Now());
    if (!due) return;
    plan = std::move(*due);
    input.job_id = jobs_.Active()->job_id();
    input.spec = jobs_.Active()->spec();
    input.shards = shards_.Map();
    for (const auto& [id, assignment] : plan.assignments) {
      worker_sequences[id] = workers_.Find(id)->sequence;
    }
  }
  input.num_nodes = plan.node_names.size();
  input.reserve_generation = [this](uint64_t newest_seen) {
    uint64_t generation;
    {
      absl::MutexLock lock(&mu_);
      generation = std::max(last_generation_, newest_seen) + 1;
      last_generation_ = generation;
      MarkDirtyLocked(true);
    }
    SaveState().IgnoreError();  // Logged inside; the generation goes ahead regardless.
    return generation;
  };
  if (options_.node_credential) {
    input.node_credential = [this, job_id = input.job_id](uint64_t generation, uint32_t rank) {
      return options_.node_credential(job_id, generation, rank);
    };
  }
  input.note = [this, job_id = input.job_id](const std::string& event) {
    absl::MutexLock lock(&mu_);
    if (v1::Job* job = jobs_.Find(job_id); job != nullptr) {
      jobs_.Transition(*job, job->state(), event, clock_->Now());
    }
  };
  // The shard calls, outside the lock.
  absl::StatusOr<FormedGeneration> formed = GenerationFormation(*shard_client_).Form(input);
  if (!formed.ok()) return FormationFailed(std::string(formed.status().message()));

  absl::MutexLock lock(&mu_);
  const std::string changed =
      ChangedWhileFormingLocked(input.job_id, input.shards, worker_sequences);
  if (!changed.empty()) {
    LOG(INFO) << "generation " << formed->number << " abandoned while forming: " << changed;
    planner_.Abandoned();
    RequestWorkLocked();
    return;
  }
  CommitGenerationLocked(*formed, input.shards, std::move(plan));
}

std::string Coordinator::ChangedWhileFormingLocked(
    const std::string& job_id, const std::vector<v1::ShardInfo>& shards,
    const std::map<std::string, uint64_t>& worker_sequences) {
  const v1::Job* job = jobs_.Active();
  if (job == nullptr || job->job_id() != job_id) return "the job ended";
  if (job->state() != v1::PENDING && job->state() != v1::RENDEZVOUS) {
    return absl::StrCat("the job became ", v1::JobState_Name(job->state()));
  }
  if (generation_.active) return "another generation formed";
  for (const auto& [id, sequence] : worker_sequences) {
    const WorkerRecord* worker = workers_.Find(id);
    if (worker == nullptr || worker->sequence != sequence || worker->failed_job == job_id) {
      return absl::StrCat("worker ", id, " left or failed");
    }
  }
  const std::vector<v1::ShardInfo> now_shards = shards_.Map();
  bool same_shards = now_shards.size() == shards.size();
  for (size_t i = 0; same_shards && i < now_shards.size(); ++i) {
    same_shards = now_shards[i].address() == shards[i].address();
  }
  return same_shards ? std::string() : "a PS shard registered again";
}

void Coordinator::CommitGenerationLocked(const FormedGeneration& formed,
                                         const std::vector<v1::ShardInfo>& shards,
                                         GenerationPlan plan) {
  v1::Job* job = jobs_.Active();
  const std::string job_id = job->job_id();
  const uint64_t generation = formed.number;
  const uint64_t resume_step = formed.resume_step;
  const uint32_t num_nodes = plan.node_names.size();
  const absl::Time now = clock_->Now();
  const bool restart_from_zero = formed.from_scratch && job->step() > 0;
  generation_ = Generation();
  generation_.number = generation;
  generation_.job_id = job_id;
  generation_.active = true;
  generation_.formed = now;
  generation_.resume_step = resume_step;
  generation_.node_names = plan.node_names;
  for (const std::string& node : generation_.node_names) {
    const std::string id = absl::StrCat(job_id, "/g", generation, "/", node);
    rendezvous_.Open(id);
    generation_.rendezvous_ids.push_back(id);
  }
  // CUT_AUTO is chosen once per job, here: the cut the shards' state was planned with
  // when they hold it, else by where this generation's replicas run.
  std::string cut_chosen;
  if (job->spec().partition_cut() == v1::CUT_AUTO) {
    bool all_gpus = !plan.assignments.empty();
    for (const auto& [id, assignment] : plan.assignments) {
      for (const v1::Device& device : assignment.devices()) all_gpus &= device.kind() == v1::GPU;
    }
    const v1::PartitionCut cut = formed.held_cut.has_value()
                                     ? *formed.held_cut
                                     : ResolvedPartitionCut(job->spec(), all_gpus);
    job->mutable_spec()->set_partition_cut(cut);
    cut_chosen =
        absl::StrCat("; partition_cut CUT_AUTO chose ", v1::PartitionCut_Name(cut),
                     formed.held_cut.has_value() ? " (the cut of the state the PS shards hold)"
                     : cut == v1::CUT_LAYERS     ? " (SYNC with every replica on a GPU)"
                                                 : " (not SYNC with every replica on a GPU)");
  }
  uint32_t total_replicas = 0;
  for (auto& [id, assignment] : plan.assignments) {
    assignment.set_job_id(job_id);
    assignment.set_generation(generation);
    assignment.set_rendezvous_id(generation_.rendezvous_ids[assignment.node_rank()]);
    for (const v1::ShardInfo& shard : shards) *assignment.add_shards() = shard;
    *assignment.mutable_job() = job->spec();
    assignment.set_resume_step(resume_step);
    if (options_.node_credential) {
      assignment.set_node_credential(
          options_.node_credential(job_id, generation, assignment.node_rank()));
    }
    total_replicas = assignment.total_replicas();
    workers_.Find(id)->note.clear();
    generation_.assignments[id] = std::move(assignment);
  }
  job->set_generation(generation);
  job->set_step(resume_step);
  histories_.For(job_id).ResumeAt(resume_step, now);
  histories_.MarkChanged(job_id, false);
  if (job->steps_per_epoch() > 0) job->set_epoch(resume_step / job->steps_per_epoch());
  if (!job->has_started()) *job->mutable_started() = ToProto(now);
  ++counters_.generations_formed;
  planner_.Formed();
  std::string reason = absl::StrCat("generation ", generation, " formed: ", num_nodes, " node(s) [",
                                    absl::StrJoin(generation_.node_names, ", "), "], ",
                                    generation_.assignments.size(), " worker(s), ", total_replicas,
                                    " replica(s); resuming at step ", resume_step);
  if (restart_from_zero) {
    absl::StrAppend(&reason, " (the PS shards hold no state of this job: training restarts)");
  }
  absl::StrAppend(&reason, cut_chosen);
  if (!formed.installing.empty()) {
    absl::StrAppend(&reason, "; shard(s) ", absl::StrJoin(formed.installing, ", "),
                    " get the job at this generation from the workers' InitPartitions");
  }
  jobs_.Transition(*job, v1::RENDEZVOUS, reason, now);
}

}  // namespace tributary::coordinator
