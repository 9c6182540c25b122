#include "services/coordinator/coordinator.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

// Jobs kept in memory and in the state file; the oldest finished ones go first.
constexpr size_t kMaxJobsKept = 100;
// Ended generations remembered so that a worker still acting in one learns why.
constexpr size_t kEndedGenerationsKept = 64;

google::protobuf::Timestamp ToProto(absl::Time time) {
  google::protobuf::Timestamp stamp;
  const int64_t micros = absl::ToUnixMicros(time);
  stamp.set_seconds(micros / 1000000);
  stamp.set_nanos(static_cast<int32_t>((micros % 1000000) * 1000));
  return stamp;
}

absl::Time FromProto(const google::protobuf::Timestamp& stamp) {
  return absl::FromUnixSeconds(stamp.seconds()) + absl::Nanoseconds(stamp.nanos());
}

bool IsTerminal(v1::JobState state) {
  return state == v1::COMPLETED || state == v1::FAILED || state == v1::STOPPED;
}

std::string RandomHex(int digits) {
  absl::BitGen random;
  std::string hex;
  for (int i = 0; i < digits; ++i) hex.push_back("0123456789abcdef"[absl::Uniform(random, 0, 16)]);
  return hex;
}

std::string Seconds(absl::Duration duration) {
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(duration));
}

std::string DescribeWorker(const std::string& id, const v1::RegisterWorkerRequest& registration) {
  return absl::StrCat("worker ", id, " (node ", registration.node_name(), ")");
}

// Training steps are counted: a worker's `step` is how many steps it has completed,
// which is also the index of the next step it runs.
uint64_t TrainSamples(const v1::JobSpec& spec) {
  if (spec.dataset().format() != v1::SYNTHETIC) return 0;
  uint64_t samples = spec.dataset().synthetic_train_samples();
  if (spec.dataset().train_limit() > 0) samples = std::min(samples, spec.dataset().train_limit());
  return samples;
}

// Keeps at most `limit` points by dropping every other one of the older points, so a
// long run still shows its whole curve at a coarser resolution.
void ThinProgress(google::protobuf::RepeatedPtrField<v1::ProgressPoint>& points, size_t limit) {
  if (limit < 2 || static_cast<size_t>(points.size()) <= limit) return;
  google::protobuf::RepeatedPtrField<v1::ProgressPoint> kept;
  const int last = points.size() - 1;
  for (int i = 0; i < last; i += 2) *kept.Add() = points[i];
  *kept.Add() = points[last];
  points.Swap(&kept);
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock, ShardClient* shards)
    : options_(std::move(options)),
      clock_(clock),
      shard_client_(shards),
      state_file_(options_.state_dir.empty() ? nullptr
                                             : std::make_unique<StateFile>(options_.state_dir)),
      rendezvous_(clock, options_.rendezvous),
      incarnation_(RandomHex(6)) {}

Coordinator::~Coordinator() = default;

absl::Status Coordinator::Start() {
  if (state_file_ == nullptr) return absl::OkStatus();
  absl::StatusOr<std::optional<StateFile::Loaded>> loaded = state_file_->Load();
  if (!loaded.ok()) return loaded.status();
  {
    absl::MutexLock lock(&mu_);
    if (loaded->has_value()) {
      const StateFile::Loaded& state = **loaded;
      if (!state.problem.empty()) LOG(ERROR) << state.problem;
      next_job_number_ = std::max<uint64_t>(1, state.state.next_job_number());
      last_generation_ = state.state.last_generation();
      for (const v1::Job& job : state.state.jobs()) jobs_.push_back(job);
      for (const v1::ShardInfo& info : state.state.shards()) {
        ShardRecord record;
        record.info = info;
        record.registered = clock_->Now();
        *record.summary.mutable_shard() = info;
        record.summary.set_error("registered before the coordinator restarted; not contacted yet");
        record.summary.set_checkpoint_age_seconds(-1);
        shards_[info.shard_index()] = std::move(record);
      }
      LOG(INFO) << "coordinator state loaded from " << state.source << ": " << jobs_.size()
                << " job(s), " << shards_.size() << " PS shard(s), last generation "
                << last_generation_;
      if (v1::Job* job = ActiveJobLocked()) {
        const std::string problem =
            state.problem.empty() ? "" : absl::StrCat(" (", state.problem, ")");
        if (job->state() == v1::RUNNING || job->state() == v1::RENDEZVOUS) {
          TransitionLocked(
              *job, v1::RENDEZVOUS,
              absl::StrCat("coordinator restarted: generation ", job->generation(),
                           " ended with it; waiting for workers to register again", problem));
        } else if (!problem.empty() || job->state() == v1::PAUSED) {
          TransitionLocked(*job, job->state(), absl::StrCat("coordinator restarted", problem));
        }
      }
    }
    MarkDirtyLocked(true);
  }
  // Proves the directory is writable before the first job depends on it.
  return SaveState();
}

// ---------------------------------------------------------------------------------
// Lookups

v1::Job* Coordinator::ActiveJobLocked() {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if (!IsTerminal(it->state())) return &*it;
  }
  return nullptr;
}

v1::Job* Coordinator::FindJobLocked(const std::string& job_id) {
  for (v1::Job& job : jobs_) {
    if (job.job_id() == job_id) return &job;
  }
  return nullptr;
}

absl::StatusOr<v1::Job*> Coordinator::ControlTargetLocked(const std::string& job_id) {
  if (job_id.empty()) {
    v1::Job* job = ActiveJobLocked();
    if (job == nullptr) {
      return absl::FailedPreconditionError("no active job (job_id was empty)");
    }
    return job;
  }
  v1::Job* job = FindJobLocked(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job id '", job_id, "'"));
  return job;
}

std::vector<v1::ShardInfo> Coordinator::ShardMapLocked() const {
  std::vector<v1::ShardInfo> map;
  for (const auto& [index, shard] : shards_) {
    if (index < options_.ps_shards) map.push_back(shard.info);
  }
  return map;
}

std::vector<Candidate> Coordinator::CandidatesLocked(const v1::Job* job) const {
  std::vector<Candidate> candidates;
  for (const auto& [id, worker] : workers_) {
    if (worker.phase == v1::WORKER_DRAINING) continue;
    if (job != nullptr && worker.failed_job == job->job_id()) continue;
    candidates.push_back(Candidate{id, worker.sequence, worker.registration});
  }
  return candidates;
}

bool Coordinator::InGenerationLocked(const std::string& worker_id) const {
  return generation_.active && generation_.assignments.count(worker_id) > 0;
}

// ---------------------------------------------------------------------------------
// Job state machine

void Coordinator::TransitionLocked(v1::Job& job, v1::JobState to, const std::string& reason) {
  v1::JobEvent* event = job.add_events();
  *event->mutable_time() = ToProto(clock_->Now());
  event->set_from_state(job.state());
  event->set_to_state(to);
  event->set_generation(job.generation());
  event->set_reason(reason);
  if (static_cast<size_t>(job.events_size()) > options_.max_events) {
    job.mutable_events()->DeleteSubrange(0, job.events_size() - options_.max_events);
  }
  LOG(INFO) << "job " << job.job_id() << ": " << v1::JobState_Name(job.state()) << " -> "
            << v1::JobState_Name(to) << ": " << reason;
  job.set_state(to);
  job.set_state_reason(reason);
  MarkDirtyLocked(true);
}

void Coordinator::FinishJobLocked(v1::Job& job, v1::JobState to, const std::string& reason) {
  TransitionLocked(job, to, reason);
  *job.mutable_finished() = ToProto(clock_->Now());
  if (generation_.active && generation_.job_id == job.job_id()) {
    DeactivateGenerationLocked(
        absl::StrCat("job ", job.job_id(), " ", v1::JobState_Name(to), ": ", reason));
  }
  jobs_to_end_.insert(job.job_id());
  next_end_job_attempt_ = absl::InfinitePast();
  settle_since_.reset();
  scale_up_since_.reset();
  RequestWorkLocked();
}

void Coordinator::FailJobLocked(v1::Job& job, const std::string& reason) {
  FinishJobLocked(job, v1::FAILED, reason);
}

void Coordinator::CompleteJobLocked(v1::Job& job) {
  v1::JobResult& result = *job.mutable_result();
  result.set_steps(job.step());
  uint64_t pushed = 0;
  uint64_t pulled = 0;
  float accuracy = -1;
  float test_loss = 0;
  double loss_sum = 0;
  uint32_t loss_weight = 0;
  for (const auto& [id, assignment] : generation_.assignments) {
    auto worker = workers_.find(id);
    if (worker == workers_.end()) continue;
    const v1::HeartbeatRequest& report = worker->second.report;
    pushed += report.bytes_pushed();
    pulled += report.bytes_pulled();
    loss_sum += static_cast<double>(report.loss()) * assignment.replicas();
    loss_weight += assignment.replicas();
    // Rank 0's evaluation is the job's; any other worker's is a fallback.
    if (report.test_accuracy() >= 0 && (accuracy < 0 || assignment.global_rank() == 0)) {
      accuracy = report.test_accuracy();
      test_loss = report.test_loss();
    }
  }
  // The shards saw every push, also those of workers that left in earlier generations.
  uint64_t shard_in = 0;
  uint64_t shard_out = 0;
  for (const auto& [index, shard] : shards_) {
    if (shard.polled && shard.status.job_id() == job.job_id()) {
      shard_in += shard.status.bytes_in();
      shard_out += shard.status.bytes_out();
    }
  }
  result.set_bytes_pushed(std::max(pushed, shard_in));
  result.set_bytes_pulled(std::max(pulled, shard_out));
  result.set_final_loss(loss_weight > 0 ? static_cast<float>(loss_sum / loss_weight) : 0);
  result.set_test_accuracy(accuracy);
  result.set_test_loss(test_loss);
  double throughput_sum = 0;
  int throughput_points = 0;
  for (const v1::ProgressPoint& point : job.progress()) {
    if (point.samples_per_second() > 0) {
      throughput_sum += point.samples_per_second();
      ++throughput_points;
    }
  }
  result.set_samples_per_second(throughput_points > 0 ? throughput_sum / throughput_points : 0);
  if (job.has_started()) {
    result.set_wall_seconds(absl::ToDoubleSeconds(clock_->Now() - FromProto(job.started())));
  }
  FinishJobLocked(job, v1::COMPLETED,
                  absl::StrCat("all ", generation_.assignments.size(), " worker(s) of generation ",
                               generation_.number, " finished: ", job.step(), " of ",
                               job.total_steps(), " steps"));
}

// ---------------------------------------------------------------------------------
// Generations

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
  const uint64_t start_step = generation_.job_step_at_start;
  const std::string job_id = generation_.job_id;
  ++counters_.generations_ended[cause];
  DeactivateGenerationLocked(reason);
  previous_generation_.ended_by_worker_error = worker_error;
  v1::Job* job = FindJobLocked(job_id);
  if (job == nullptr || IsTerminal(job->state())) return;
  const std::string event = absl::StrCat("generation ", number, " ended: ", reason);
  TransitionLocked(*job, job->state() == v1::PAUSED ? v1::PAUSED : v1::RENDEZVOUS, event);

  // Rule B: generations that keep dying of worker errors without completing a step
  // mean the job cannot run (a bad spec the workers only find at run time, a crash
  // in the model) rather than that a machine is flaky.
  const bool progressed = job->step() > start_step;
  if (worker_error) {
    failed_generations_in_a_row_ = progressed ? 1 : failed_generations_in_a_row_ + 1;
    if (options_.max_generation_failures > 0 &&
        failed_generations_in_a_row_ >= options_.max_generation_failures) {
      FailJobLocked(*job, absl::StrCat(failed_generations_in_a_row_,
                                       " generations in a row ended by worker errors without "
                                       "completing a step; last: ",
                                       reason));
    }
  } else if (progressed) {
    failed_generations_in_a_row_ = 0;
  }
}

void Coordinator::RemoveWorkerLocked(const std::string& worker_id, const std::string& reason,
                                     const std::string& cause, bool worker_error) {
  if (InGenerationLocked(worker_id)) EndGenerationLocked(reason, cause, worker_error);
  workers_.erase(worker_id);
  RequestWorkLocked();
}

void Coordinator::RecordFailureLocked(const std::string& worker_id, uint64_t generation,
                                      const std::string& error) {
  v1::Job* job = ActiveJobLocked();
  if (job == nullptr) return;
  // Rule A: the same error from every worker is a problem of the job (a dataset file
  // missing everywhere, a model that does not fit), not of one machine. Two forms:
  // every worker of a generation of at least two workers, or every registered worker.
  Generation* target = nullptr;
  if (generation_.number == generation && generation_.number != 0) target = &generation_;
  if (previous_generation_.number == generation && previous_generation_.number != 0) {
    target = &previous_generation_;
  }
  if (target != nullptr && target->job_id == job->job_id() &&
      target->assignments.count(worker_id) > 0) {
    target->failures[worker_id] = error;
    bool same =
        target->assignments.size() >= 2 && target->failures.size() == target->assignments.size();
    for (const auto& [id, text] : target->failures) same = same && text == error;
    if (same) {
      FailJobLocked(*job, absl::StrCat("every worker of generation ", target->number, " (",
                                       target->failures.size(), ") failed with: ", error));
      return;
    }
  }
  for (const auto& [id, worker] : workers_) {
    if (worker.failed_job != job->job_id() || worker.note != error) return;
  }
  FailJobLocked(
      *job, absl::StrCat("every registered worker (", workers_.size(), ") failed with: ", error));
}

std::optional<Coordinator::FormationAttempt> Coordinator::PlanFormationLocked(absl::Time now) {
  v1::Job* job = ActiveJobLocked();
  if (job == nullptr) {
    waiting_reason_ = "no active job: submit one with SubmitJob";
    settle_since_.reset();
    return std::nullopt;
  }
  if (job->state() == v1::PAUSED) {
    waiting_reason_ = absl::StrCat("job ", job->job_id(), " is paused");
    settle_since_.reset();
    return std::nullopt;
  }
  const v1::JobSpec& spec = job->spec();
  GenerationPlan plan = PlanGeneration(spec, CandidatesLocked(job));
  for (auto& [id, worker] : workers_) {
    auto left_out = plan.left_out.find(id);
    if (left_out != plan.left_out.end()) {
      worker.note = left_out->second.reason;
    } else if (worker.failed_job != job->job_id()) {
      worker.note.clear();
    }
  }

  if (generation_.active) {
    // Scale-up: a worker that would enlarge the generation (a new node within
    // nodes_max, or one more worker on a node) re-forms it once it has been around
    // for the settle window, so that a returning worker is not left idle.
    bool grows = plan.assignments.size() > generation_.assignments.size();
    for (const auto& [id, assignment] : generation_.assignments) {
      if (plan.assignments.count(id) == 0) grows = false;
    }
    if (!grows) {
      scale_up_since_.reset();
      waiting_reason_.clear();
      return std::nullopt;
    }
    if (!scale_up_since_) scale_up_since_ = now;
    if (now - *scale_up_since_ < options_.settle_window) return std::nullopt;
    std::vector<std::string> joining;
    for (const auto& [id, assignment] : plan.assignments) {
      if (generation_.assignments.count(id) == 0) {
        joining.push_back(DescribeWorker(id, workers_.at(id).registration));
      }
    }
    scale_up_since_.reset();
    EndGenerationLocked(
        absl::StrCat(absl::StrJoin(joining, ", "), " joined; re-forming with ",
                     plan.assignments.size(), " workers on ", plan.node_names.size(), " node(s)"),
        "scale_up", false);
    settle_since_ = now - options_.settle_window;
  }
  if (now < retry_formation_at_) {
    waiting_reason_ =
        absl::StrCat(formation_error_, " (retrying in ", Seconds(retry_formation_at_ - now), ")");
    return std::nullopt;
  }
  std::vector<v1::ShardInfo> shards = ShardMapLocked();
  if (shards.size() < options_.ps_shards) {
    std::vector<uint32_t> missing;
    for (uint32_t index = 0; index < options_.ps_shards; ++index) {
      if (shards_.count(index) == 0) missing.push_back(index);
    }
    waiting_reason_ =
        absl::StrCat("waiting for PS shards: ", shards.size(), " of ", options_.ps_shards,
                     " registered (missing shard index ", absl::StrJoin(missing, ", "), ")");
    return std::nullopt;
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
    for (const auto& [id, worker] : workers_) {
      if (worker.failed_job == job->job_id()) {
        notes.push_back(
            absl::StrCat(DescribeWorker(id, worker.registration), " failed: ", worker.note));
      }
    }
    if (!notes.empty()) absl::StrAppend(&waiting_reason_, "; ", absl::StrJoin(notes, "; "));
    return std::nullopt;
  }
  if (!settle_since_) settle_since_ = now;
  if (plan.node_names.size() < spec.nodes_max() && now - *settle_since_ < options_.settle_window) {
    waiting_reason_ =
        absl::StrCat("settling: ", plan.node_names.size(), " of nodes_max=", spec.nodes_max(),
                     " node group(s) present; forming in ",
                     Seconds(*settle_since_ + options_.settle_window - now));
    return std::nullopt;
  }
  waiting_reason_ = absl::StrCat("forming generation ", last_generation_ + 1);
  FormationAttempt attempt;
  attempt.job_id = job->job_id();
  attempt.spec = spec;
  for (const auto& [id, assignment] : plan.assignments) {
    attempt.worker_sequences[id] = workers_.at(id).sequence;
  }
  attempt.plan = std::move(plan);
  attempt.shards = std::move(shards);
  return attempt;
}

void Coordinator::FormationFailed(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  LOG(WARNING) << "generation not formed: " << reason;
  ++counters_.formation_failures;
  formation_error_ = reason;
  waiting_reason_ = reason;
  retry_formation_at_ = clock_->Now() + options_.formation_retry;
}

void Coordinator::FormGenerationIfDue() {
  std::optional<FormationAttempt> attempt;
  {
    absl::MutexLock lock(&mu_);
    attempt = PlanFormationLocked(clock_->Now());
  }
  if (!attempt) return;

  // 1. Where the shards stand: the resume step and the newest generation they saw.
  uint64_t newest_shard_generation = 0;
  std::vector<uint32_t> holding;
  std::vector<uint32_t> empty;
  uint64_t resume_step = UINT64_MAX;
  for (const v1::ShardInfo& shard : attempt->shards) {
    absl::StatusOr<v1::ShardStatus> status = shard_client_->GetShardStatus(shard);
    if (!status.ok()) {
      FormationFailed(std::string(status.status().message()));
      return;
    }
    newest_shard_generation = std::max(newest_shard_generation, status->generation());
    if (status->job_id() == attempt->job_id) {
      holding.push_back(shard.shard_index());
      resume_step = std::min(resume_step, status->step());
    } else if (status->job_id().empty()) {
      empty.push_back(shard.shard_index());
    } else {
      // A job this coordinator no longer runs (it ended while the shard was away, or a
      // coordinator without --state_dir forgot it): free the shard for the active one.
      absl::Status ended = shard_client_->EndJob(shard, status->job_id());
      if (!ended.ok() && !absl::IsNotFound(ended)) {
        FormationFailed(absl::StrCat("PS shard ", shard.shard_index(), " at ", shard.address(),
                                     " holds job ", status->job_id(),
                                     " and did not end it: ", ended.message()));
        return;
      }
      empty.push_back(shard.shard_index());
    }
  }
  if (holding.empty()) resume_step = 0;
  if (resume_step > 0 && !empty.empty()) {
    FormationFailed(absl::StrCat(
        "PS shard(s) ", absl::StrJoin(empty, ", "), " hold no state of job ", attempt->job_id,
        " while shard(s) ", absl::StrJoin(holding, ", "), " stand at step ", resume_step,
        " or later: restart the empty shard(s) with their checkpoint directory, or stop the job"));
    return;
  }

  // 2. A generation number nobody has seen; on disk before any shard hears of it.
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = std::max(last_generation_, newest_shard_generation) + 1;
    last_generation_ = generation;
    MarkDirtyLocked(true);
  }
  SaveState().IgnoreError();  // Logged inside; the generation goes ahead regardless.

  // 3. Every shard learns the generation before any worker does.
  const uint32_t num_nodes = attempt->plan.node_names.size();
  std::set<uint32_t> pending;
  for (const v1::ShardInfo& shard : attempt->shards) {
    v1::BeginGenerationRequest request;
    request.set_job_id(attempt->job_id);
    request.set_generation(generation);
    request.set_num_nodes(num_nodes);
    request.set_resume_step(resume_step);
    absl::StatusOr<v1::BeginGenerationResponse> begun =
        shard_client_->BeginGeneration(shard, request);
    if (begun.ok()) continue;
    const bool fresh_shard =
        std::find(empty.begin(), empty.end(), shard.shard_index()) != empty.end();
    if (absl::IsFailedPrecondition(begun.status()) && fresh_shard && resume_step == 0) {
      // The shard holds no job yet: the workers' InitPartitions installs it, and
      // PollShards repeats BeginGeneration as soon as the shard reports the job.
      pending.insert(shard.shard_index());
      continue;
    }
    FormationFailed(absl::StrCat("BeginGeneration(generation ", generation, ", resume step ",
                                 resume_step, ") on PS shard ", shard.shard_index(), " at ",
                                 shard.address(), ": ", begun.status().message()));
    return;
  }

  // 4. Hand out the assignments, unless the world changed meanwhile.
  absl::MutexLock lock(&mu_);
  v1::Job* job = ActiveJobLocked();
  std::string changed;
  if (job == nullptr || job->job_id() != attempt->job_id) {
    changed = "the job ended";
  } else if (job->state() != v1::PENDING && job->state() != v1::RENDEZVOUS) {
    changed = absl::StrCat("the job became ", v1::JobState_Name(job->state()));
  } else if (generation_.active) {
    changed = "another generation formed";
  } else {
    for (const auto& [id, sequence] : attempt->worker_sequences) {
      auto worker = workers_.find(id);
      if (worker == workers_.end() || worker->second.sequence != sequence ||
          worker->second.failed_job == job->job_id()) {
        changed = absl::StrCat("worker ", id, " left or failed");
        break;
      }
    }
    const std::vector<v1::ShardInfo> shards = ShardMapLocked();
    bool same_shards = shards.size() == attempt->shards.size();
    for (size_t i = 0; same_shards && i < shards.size(); ++i) {
      same_shards = shards[i].address() == attempt->shards[i].address();
    }
    if (changed.empty() && !same_shards) changed = "a PS shard registered again";
  }
  if (!changed.empty()) {
    LOG(INFO) << "generation " << generation << " abandoned while forming: " << changed;
    formation_error_.clear();
    RequestWorkLocked();
    return;
  }

  const absl::Time now = clock_->Now();
  const bool restart_from_zero = holding.empty() && job->step() > 0;
  generation_ = Generation();
  generation_.number = generation;
  generation_.job_id = job->job_id();
  generation_.active = true;
  generation_.formed = now;
  generation_.resume_step = resume_step;
  generation_.job_step_at_start = resume_step;
  generation_.node_names = attempt->plan.node_names;
  generation_.shards_pending = pending;
  for (const std::string& node : generation_.node_names) {
    const std::string id = absl::StrCat(job->job_id(), "/g", generation, "/", node);
    rendezvous_.Open(id);
    generation_.rendezvous_ids.push_back(id);
  }
  uint32_t total_replicas = 0;
  for (auto& [id, assignment] : attempt->plan.assignments) {
    assignment.set_job_id(job->job_id());
    assignment.set_generation(generation);
    assignment.set_rendezvous_id(generation_.rendezvous_ids[assignment.node_rank()]);
    for (const v1::ShardInfo& shard : attempt->shards) *assignment.add_shards() = shard;
    *assignment.mutable_job() = job->spec();
    assignment.set_resume_step(resume_step);
    total_replicas = assignment.total_replicas();
    workers_.at(id).note.clear();
    generation_.assignments[id] = std::move(assignment);
  }
  job->set_generation(generation);
  job->set_step(resume_step);
  if (job->steps_per_epoch() > 0) job->set_epoch(resume_step / job->steps_per_epoch());
  if (!job->has_started()) *job->mutable_started() = ToProto(now);
  ++counters_.generations_formed;
  settle_since_.reset();
  scale_up_since_.reset();
  formation_error_.clear();
  waiting_reason_.clear();
  std::string reason = absl::StrCat("generation ", generation, " formed: ", num_nodes, " node(s) [",
                                    absl::StrJoin(generation_.node_names, ", "), "], ",
                                    generation_.assignments.size(), " worker(s), ", total_replicas,
                                    " replica(s); resuming at step ", resume_step);
  if (restart_from_zero) {
    absl::StrAppend(&reason, " (the PS shards hold no state of this job: training restarts)");
  }
  if (!pending.empty()) {
    absl::StrAppend(&reason, "; shard(s) ", absl::StrJoin(pending, ", "),
                    " join the generation after InitPartitions");
  }
  TransitionLocked(*job, v1::RENDEZVOUS, reason);
}

// ---------------------------------------------------------------------------------
// Progress and failure detection

void Coordinator::UpdateProgressLocked(absl::Time now) {
  v1::Job* job = FindJobLocked(generation_.job_id);
  if (!generation_.active || job == nullptr || IsTerminal(job->state())) return;
  bool all_training = true;
  bool all_finished = true;
  uint64_t step = UINT64_MAX;
  uint32_t min_epoch = UINT32_MAX;
  double loss_sum = 0;
  uint32_t loss_weight = 0;
  double throughput = 0;
  float accuracy = -1;
  for (const auto& [id, assignment] : generation_.assignments) {
    auto found = workers_.find(id);
    if (found == workers_.end() || !found->second.reported ||
        found->second.report.generation() != generation_.number) {
      all_training = all_finished = false;
      step = std::min(step, generation_.resume_step);
      continue;
    }
    const v1::HeartbeatRequest& report = found->second.report;
    step = std::min(step, std::max(report.step(), generation_.resume_step));
    min_epoch = std::min(min_epoch, report.epoch());
    if (report.phase() != v1::WORKER_TRAINING && report.phase() != v1::WORKER_PAUSED &&
        report.phase() != v1::WORKER_PAUSING && report.phase() != v1::WORKER_FINISHED) {
      all_training = false;
    }
    if (report.phase() != v1::WORKER_FINISHED) all_finished = false;
    if (report.total_steps() > 0) job->set_total_steps(report.total_steps());
    if (report.steps_per_epoch() > 0) job->set_steps_per_epoch(report.steps_per_epoch());
    if (report.step() > generation_.resume_step) {
      loss_sum += static_cast<double>(report.loss()) * assignment.replicas();
      loss_weight += assignment.replicas();
    }
    throughput += report.samples_per_second();
    if (report.test_accuracy() >= 0 && (accuracy < 0 || assignment.global_rank() == 0)) {
      accuracy = report.test_accuracy();
    }
  }
  if (step == UINT64_MAX) step = generation_.resume_step;
  const bool advanced = step > job->step();
  job->set_step(step);
  if (job->steps_per_epoch() > 0) {
    job->set_epoch(static_cast<uint32_t>(step / job->steps_per_epoch()));
  } else if (min_epoch != UINT32_MAX) {
    job->set_epoch(min_epoch);
  }
  if (advanced && loss_weight > 0) {
    if (accuracy < 0 && job->progress_size() > 0) {
      accuracy = job->progress(job->progress_size() - 1).test_accuracy();
    }
    v1::ProgressPoint* point = job->add_progress();
    point->set_step(step);
    point->set_epoch(job->epoch());
    point->set_loss(static_cast<float>(loss_sum / loss_weight));
    point->set_test_accuracy(accuracy);
    point->set_samples_per_second(throughput);
    *point->mutable_time() = ToProto(now);
    ThinProgress(*job->mutable_progress(), options_.progress_history);
    MarkDirtyLocked(false);
  }
  if (all_training && job->state() == v1::RENDEZVOUS) {
    TransitionLocked(
        *job, v1::RUNNING,
        absl::StrCat("all ", generation_.assignments.size(), " worker(s) of generation ",
                     generation_.number, " are training from step ", generation_.resume_step));
  }
  if (all_finished) CompleteJobLocked(*job);
}

std::optional<uint64_t> Coordinator::PauseBoundaryLocked() {
  if (generation_.pause_at_step.has_value()) return generation_.pause_at_step;
  // Known once every worker of the generation holds somewhere: the highest of their
  // boundaries (SYNC nodes stand at most one step apart, bounded-staleness ones at most
  // `staleness`), so that none holds before a step whose push another one waits for.
  uint64_t boundary = 0;
  for (const auto& [id, assignment] : generation_.assignments) {
    auto found = workers_.find(id);
    if (found == workers_.end() || !found->second.reported ||
        found->second.report_number <= generation_.pause_asked_after) {
      return std::nullopt;
    }
    const v1::HeartbeatRequest& report = found->second.report;
    if (report.generation() != generation_.number ||
        (report.phase() != v1::WORKER_PAUSING && report.phase() != v1::WORKER_PAUSED)) {
      return std::nullopt;
    }
    boundary = std::max(boundary, report.holding_at_step());
  }
  generation_.pause_at_step = boundary;
  LOG(INFO) << "job paused: every worker of generation " << generation_.number
            << " holds; they pause before step " << boundary;
  return boundary;
}

void Coordinator::ExpireSilentWorkersLocked(absl::Time now) {
  std::vector<std::string> silent;
  for (const auto& [id, worker] : workers_) {
    if (now - worker.last_heartbeat > options_.heartbeat_timeout) silent.push_back(id);
  }
  for (const std::string& id : silent) {
    const WorkerRecord& worker = workers_.at(id);
    const std::string reason =
        absl::StrCat(DescribeWorker(id, worker.registration), " missed heartbeats for ",
                     Seconds(now - worker.last_heartbeat),
                     " (--heartbeat_timeout=", Seconds(options_.heartbeat_timeout), ")");
    LOG(WARNING) << reason << "; removing it";
    RemoveWorkerLocked(id, reason, "worker_timeout", false);
  }
}

// ---------------------------------------------------------------------------------
// Workers

void Coordinator::HandleRegisterWorker(const v1::RegisterWorkerRequest& request,
                                       v1::RegisterWorkerResponse* reply, ReplyCallback done) {
  bool deferred = false;
  const absl::Status status = RegisterWorker(request, reply, done, &deferred);
  if (!deferred) done(status);
}

absl::Status Coordinator::RegisterWorker(const v1::RegisterWorkerRequest& request,
                                         v1::RegisterWorkerResponse* reply,
                                         const ReplyCallback& done, bool* deferred) {
  if (absl::Status valid = ValidateRegistration(request); !valid.ok()) return valid;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    // The same endpoint registering again is a restarted worker: its old record would
    // otherwise hold its GPUs until the heartbeat timeout.
    std::vector<std::string> replaced;
    for (const auto& [other_id, other] : workers_) {
      const v1::RegisterWorkerRequest& old = other.registration;
      if (old.node_name() != request.node_name() || old.host() != request.host()) continue;
      if ((request.grpc_port() != 0 && old.grpc_port() == request.grpc_port()) ||
          (request.pid() != 0 && old.pid() == request.pid())) {
        replaced.push_back(other_id);
      }
    }
    for (const std::string& other_id : replaced) {
      RemoveWorkerLocked(other_id,
                         absl::StrCat(DescribeWorker(other_id, workers_.at(other_id).registration),
                                      " registered again from ", request.host()),
                         "worker_left", false);
    }
    // Two explicit requests for one GPU of a node can never both be met.
    for (int32_t index : request.requested_gpus()) {
      v1::Device wanted;
      for (const v1::Device& device : request.devices()) {
        if (device.kind() == v1::GPU && device.index() == index) wanted = device;
      }
      for (const auto& [other_id, other] : workers_) {
        if (other.registration.node_name() != request.node_name()) continue;
        for (int32_t other_index : other.registration.requested_gpus()) {
          for (const v1::Device& device : other.registration.devices()) {
            if (device.kind() == v1::GPU && device.index() == other_index &&
                GpuKey(device) == GpuKey(wanted)) {
              return absl::ResourceExhaustedError(absl::StrCat(
                  "node ", request.node_name(), ": ", DescribeGpu(wanted),
                  " is already requested by worker ", other_id, "; no free GPU for this request"));
            }
          }
        }
      }
    }
    const std::string id = absl::StrCat("w", next_worker_sequence_, "-", incarnation_);
    WorkerRecord record;
    record.id = id;
    record.sequence = next_worker_sequence_;
    record.registration = request;
    record.registered = now;
    record.last_heartbeat = now;
    // With a job running, a worker its node has no GPUs for learns it now.
    v1::Job* job = ActiveJobLocked();
    if (job != nullptr) {
      std::vector<Candidate> candidates = CandidatesLocked(job);
      candidates.push_back(Candidate{id, record.sequence, request});
      GenerationPlan plan = PlanGeneration(job->spec(), candidates);
      auto left_out = plan.left_out.find(id);
      if (left_out != plan.left_out.end() && left_out->second.kind == LeftOut::Kind::kTooFewGpus) {
        return absl::ResourceExhaustedError(left_out->second.reason);
      }
    }
    ++next_worker_sequence_;
    workers_.emplace(id, std::move(record));
    LOG(INFO) << DescribeWorker(id, request) << " registered from " << request.host() << ":"
              << request.grpc_port() << " with " << request.devices_size() << " device(s)";
    reply->set_worker_id(id);
    reply->set_heartbeat_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
    // When this registration may complete a generation, answer after the next pass so
    // the assignment comes with the answer.
    *deferred = job != nullptr && !generation_.active &&
                (job->state() == v1::PENDING || job->state() == v1::RENDEZVOUS);
    if (*deferred) {
      after_tick_.push_back([this, id, reply, done]() {
        {
          absl::MutexLock lock(&mu_);
          if (InGenerationLocked(id)) *reply->mutable_assignment() = generation_.assignments.at(id);
        }
        done(absl::OkStatus());
      });
    }
    RequestWorkLocked();
  }
  return absl::OkStatus();
}

void Coordinator::HandleHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply,
                                  ReplyCallback done) {
  done(Heartbeat(request, reply));
}

absl::Status Coordinator::Heartbeat(const v1::HeartbeatRequest& request,
                                    v1::HeartbeatResponse* reply) {
  if (!v1::WorkerPhase_IsValid(request.phase())) {
    return absl::InvalidArgumentError(
        absl::StrCat("phase: unknown worker phase ", static_cast<int>(request.phase())));
  }
  absl::MutexLock lock(&mu_);
  auto found = workers_.find(request.worker_id());
  if (found == workers_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "unknown worker id '", request.worker_id(),
        "': register again (the coordinator restarted, or removed the worker after missed "
        "heartbeats)"));
  }
  WorkerRecord& worker = found->second;
  const absl::Time now = clock_->Now();
  worker.last_heartbeat = now;
  worker.report = request;
  worker.report_number = ++heartbeats_received_;
  worker.reported = true;
  worker.phase = request.phase();
  const std::string id = worker.id;
  if (request.phase() == v1::WORKER_FAILED) {
    const std::string error = request.error().empty() ? "no error message" : request.error();
    v1::Job* job = ActiveJobLocked();
    const bool first_report = job != nullptr && worker.failed_job != job->job_id();
    if (job != nullptr) worker.failed_job = job->job_id();
    worker.note = error;
    if (first_report) {
      LOG(WARNING) << DescribeWorker(id, worker.registration) << " failed: " << error;
    }
    RecordFailureLocked(id, request.generation(), error);
    if (InGenerationLocked(id)) {
      EndGenerationLocked(absl::StrCat(DescribeWorker(id, worker.registration), " failed: ", error),
                          "worker_failed", true);
    }
  } else if (request.phase() == v1::WORKER_RENDEZVOUS && !request.error().empty() &&
             InGenerationLocked(id) && request.generation() == generation_.number) {
    // The worker gave up its step or could not start the generation (a collective or
    // a shard failed) and waits for a new one. Nobody else may notice (every process
    // is still alive), so the generation ends here. It counts as a worker error: a
    // cause that persists fails the job by rule B instead of re-forming forever.
    EndGenerationLocked(
        absl::StrCat(DescribeWorker(id, worker.registration), " left its step: ", request.error()),
        "worker_step_failed", true);
  } else if (!worker.failed_job.empty()) {
    // Reporting another phase means the worker recovered and may join again.
    worker.failed_job.clear();
    worker.note.clear();
    RequestWorkLocked();
  }
  if (InGenerationLocked(id) && request.generation() == generation_.number) {
    UpdateProgressLocked(now);
  }
  auto still = workers_.find(id);
  if (still != workers_.end()) AnswerHeartbeatLocked(still->second, request.generation(), reply);
  return absl::OkStatus();
}

void Coordinator::AnswerHeartbeatLocked(const WorkerRecord& worker, uint64_t reported_generation,
                                        v1::HeartbeatResponse* reply) {
  reply->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  if (InGenerationLocked(worker.id)) {
    const v1::Assignment& assignment = generation_.assignments.at(worker.id);
    v1::Job* job = FindJobLocked(generation_.job_id);
    if (reported_generation != generation_.number) {
      reply->set_action(v1::ACTION_RENDEZVOUS);
      *reply->mutable_assignment() = assignment;
      reply->set_message(
          absl::StrCat("generation ", generation_.number, ": node ", assignment.node_rank(), " of ",
                       assignment.num_nodes(), ", rank ", assignment.global_rank(), " of ",
                       assignment.world_size(), ", resume at step ", assignment.resume_step()));
    } else if (job != nullptr && job->state() == v1::PAUSED) {
      reply->set_action(v1::ACTION_PAUSE);
      reply->set_message(absl::StrCat("job ", job->job_id(), " paused: ", job->state_reason()));
      if (job->spec().mode() != v1::ASYNC) {
        if (std::optional<uint64_t> boundary = PauseBoundaryLocked()) {
          reply->set_pause_at_step(*boundary);
        }
      }
    } else {
      reply->set_action(v1::ACTION_CONTINUE);
    }
    return;
  }
  if (reported_generation != 0) {
    auto ended = ended_.find(reported_generation);
    if (ended != ended_.end()) {
      v1::Job* job = FindJobLocked(ended->second.first);
      if (job != nullptr && IsTerminal(job->state())) {
        reply->set_action(v1::ACTION_STOP);
        reply->set_message(absl::StrCat("job ", job->job_id(), " ", v1::JobState_Name(job->state()),
                                        ": ", job->state_reason()));
        return;
      }
      reply->set_action(v1::ACTION_WAIT);
      reply->set_message(
          absl::StrCat("generation ", reported_generation, " ended: ", ended->second.second,
                       waiting_reason_.empty() ? "" : absl::StrCat("; ", waiting_reason_)));
      return;
    }
  }
  reply->set_action(v1::ACTION_WAIT);
  if (!worker.note.empty()) {
    reply->set_message(worker.note);
  } else if (generation_.active) {
    reply->set_message(absl::StrCat("generation ", generation_.number,
                                    " is running without this worker; it joins at the next "
                                    "generation"));
  } else {
    reply->set_message(waiting_reason_);
  }
}

void Coordinator::HandleDeregister(const v1::DeregisterRequest& request,
                                   v1::DeregisterResponse* reply, ReplyCallback done) {
  done(Deregister(request, reply));
}

absl::Status Coordinator::Deregister(const v1::DeregisterRequest& request,
                                     v1::DeregisterResponse* reply) {
  absl::MutexLock lock(&mu_);
  auto found = workers_.find(request.worker_id());
  if (found == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown worker id '", request.worker_id(), "'"));
  }
  const std::string reason =
      absl::StrCat(DescribeWorker(found->first, found->second.registration), " left",
                   request.reason().empty() ? "" : absl::StrCat(": ", request.reason()));
  LOG(INFO) << reason;
  RemoveWorkerLocked(request.worker_id(), reason, "worker_left", false);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------
// Parameter server shards

void Coordinator::HandleRegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                                v1::RegisterParameterServerResponse* reply,
                                                ReplyCallback done) {
  done(RegisterParameterServer(request, reply));
}

absl::Status Coordinator::RegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                                  v1::RegisterParameterServerResponse* reply) {
  if (request.address().empty()) {
    return absl::InvalidArgumentError(
        "address: must not be empty (host:port of the shard's ParameterServer service)");
  }
  if (request.shard_index() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index: must be >= 0, or -1 to let the coordinator pick; got ",
                     request.shard_index()));
  }
  absl::MutexLock lock(&mu_);
  const auto live = [](const ShardRecord& shard) {
    return !shard.polled || shard.summary.reachable();
  };
  int64_t index = request.shard_index();
  if (index >= 0) {
    if (index >= options_.ps_shards) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_index ", index, " is out of range: --ps_shards=", options_.ps_shards,
                       " expects shard indices 0..", options_.ps_shards - 1));
    }
    auto holder = shards_.find(static_cast<uint32_t>(index));
    if (holder != shards_.end() && holder->second.info.address() != request.address() &&
        live(holder->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_index ", index, " is taken by the live shard at ", holder->second.info.address()));
    }
  } else {
    for (const auto& [taken, shard] : shards_) {
      if (shard.info.address() == request.address()) index = taken;
    }
    for (uint32_t free = 0; index < 0 && free < options_.ps_shards; ++free) {
      if (shards_.count(free) == 0) index = free;
    }
    for (uint32_t stale = 0; index < 0 && stale < options_.ps_shards; ++stale) {
      if (!live(shards_.at(stale))) index = stale;
    }
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("all ", options_.ps_shards,
                                                     " shard indices are taken by live shards "
                                                     "(--ps_shards=",
                                                     options_.ps_shards, ")"));
    }
  }
  const uint32_t shard_index = static_cast<uint32_t>(index);
  auto previous = shards_.find(shard_index);
  const std::string was = previous == shards_.end() ? "" : previous->second.info.address();
  ShardRecord record;
  record.info.set_shard_index(shard_index);
  record.info.set_address(request.address());
  record.info.set_http_port(request.http_port());
  record.version = request.version();
  record.registered = clock_->Now();
  *record.summary.mutable_shard() = record.info;
  record.summary.set_error("not contacted yet");
  record.summary.set_checkpoint_age_seconds(-1);
  shards_[shard_index] = std::move(record);
  MarkDirtyLocked(true);
  LOG(INFO) << "PS shard " << shard_index << " registered at " << request.address()
            << (was.empty() ? "" : absl::StrCat(" (was at ", was, ")"));
  if (generation_.active && !was.empty()) {
    // The shard restarted or moved: its in-flight aggregates are gone and its step may
    // have gone back to a checkpoint, so the resume step must be worked out again.
    EndGenerationLocked(
        absl::StrCat("PS shard ", shard_index, " registered again at ", request.address(),
                     was == request.address() ? "" : absl::StrCat(" (was ", was, ")")),
        "shard_registered", false);
  }
  RequestWorkLocked();
  reply->set_shard_index(shard_index);
  reply->set_expected_shards(options_.ps_shards);
  return absl::OkStatus();
}

absl::Duration Coordinator::PollShards() {
  std::vector<v1::ShardInfo> shards;
  Generation generation;
  std::string active_job;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [index, shard] : shards_) shards.push_back(shard.info);
    if (generation_.active) {
      generation.number = generation_.number;
      generation.job_id = generation_.job_id;
      generation.resume_step = generation_.resume_step;
      generation.node_names = generation_.node_names;
    }
    if (v1::Job* job = ActiveJobLocked()) active_job = job->job_id();
  }
  const absl::Time now = clock_->Now();
  for (const v1::ShardInfo& shard : shards) {
    absl::StatusOr<v1::ShardStatus> status = shard_client_->GetShardStatus(shard);
    std::string action_error;
    bool caught_up = false;
    if (status.ok() && generation.number != 0 && status->job_id() == generation.job_id) {
      if (status->generation() < generation.number) {
        v1::BeginGenerationRequest request;
        request.set_job_id(generation.job_id);
        request.set_generation(generation.number);
        request.set_num_nodes(generation.node_names.size());
        request.set_resume_step(generation.resume_step);
        absl::StatusOr<v1::BeginGenerationResponse> begun =
            shard_client_->BeginGeneration(shard, request);
        if (begun.ok()) {
          caught_up = true;
          LOG(INFO) << "PS shard " << shard.shard_index() << " joined generation "
                    << generation.number;
        } else {
          action_error =
              absl::StrCat("BeginGeneration(", generation.number, "): ", begun.status().message());
        }
      } else {
        caught_up = true;
      }
    } else if (status.ok() && !active_job.empty() && !status->job_id().empty() &&
               status->job_id() != active_job) {
      absl::Status ended = shard_client_->EndJob(shard, status->job_id());
      if (!ended.ok() && !absl::IsNotFound(ended)) {
        action_error = absl::StrCat("EndJob(", status->job_id(), "): ", ended.message());
      }
    }
    absl::MutexLock lock(&mu_);
    auto record = shards_.find(shard.shard_index());
    if (record == shards_.end() || record->second.info.address() != shard.address()) continue;
    v1::ShardSummary& summary = record->second.summary;
    record->second.polled = true;
    summary.set_reachable(status.ok());
    if (!status.ok()) {
      summary.set_error(std::string(status.status().message()));
      continue;
    }
    record->second.status = *status;
    summary.set_error(action_error);
    summary.set_step(status->step());
    summary.set_bytes_in(status->bytes_in());
    summary.set_bytes_out(status->bytes_out());
    summary.set_aggregation_wait_seconds(status->aggregation_wait_seconds());
    summary.set_partitions(status->partitions_size());
    summary.set_checkpoint_age_seconds(status->checkpoint_age_seconds());
    if (!action_error.empty()) {
      LOG_EVERY_N(WARNING, 20) << "PS shard " << shard.shard_index() << ": " << action_error;
    }
    if (caught_up && generation_.active && generation_.number == generation.number) {
      generation_.shards_pending.erase(shard.shard_index());
    }
  }
  (void)now;
  absl::MutexLock lock(&mu_);
  // A shard that still has to join the generation is polled often: the workers wait
  // for it before their first push.
  return generation_.active && !generation_.shards_pending.empty()
             ? std::min(options_.shard_poll_interval, absl::Milliseconds(100))
             : options_.shard_poll_interval;
}

// ---------------------------------------------------------------------------------
// Rendezvous

void Coordinator::HandlePublishRendezvous(const v1::PublishRendezvousRequest& request,
                                          v1::PublishRendezvousResponse* reply,
                                          ReplyCallback done) {
  done(rendezvous_.Publish(request.rendezvous_id(), request.key(), request.value()));
}

uint64_t Coordinator::HandleWaitRendezvous(const v1::WaitRendezvousRequest& request,
                                           v1::WaitRendezvousResponse* reply, ReplyCallback done) {
  std::vector<std::string> keys(request.keys().begin(), request.keys().end());
  return rendezvous_.Wait(
      request.rendezvous_id(), keys, absl::Milliseconds(request.timeout_ms()),
      [reply, done = std::move(done)](absl::Status status, std::vector<std::string> values) {
        for (std::string& value : values) reply->add_values(std::move(value));
        done(status);
      });
}

bool Coordinator::CancelWaitRendezvous(uint64_t wait_id) { return rendezvous_.Cancel(wait_id); }

// ---------------------------------------------------------------------------------
// Jobs

void Coordinator::HandleSubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply,
                                  ReplyCallback done) {
  done(SubmitJob(request, reply));
}

absl::Status Coordinator::SubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply) {
  v1::JobSpec spec = WithDefaults(request.spec());
  if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  }
  if (IsTorchScript(spec.model())) {
    // The workers fetch the file from here: it must be stored before the job exists.
    v1::TorchScriptFile& file = *spec.mutable_model()->mutable_torchscript();
    if (!options_.model_size) {
      return absl::FailedPreconditionError(
          "spec.model: this coordinator stores no model files, so it cannot run torchscript "
          "jobs");
    }
    absl::StatusOr<uint64_t> size = options_.model_size(file.sha256());
    if (!size.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.model.torchscript.sha256: model file ", file.file_name(), ": ",
          size.status().message()));
    }
    file.set_size_bytes(*size);
  }
  {
    absl::MutexLock lock(&mu_);
    if (v1::Job* active = ActiveJobLocked()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", active->job_id(), " ('", active->spec().name(), "') is ",
                       v1::JobState_Name(active->state()),
                       ": the coordinator runs one active job at a time; stop it first"));
    }
    v1::Job job;
    job.set_job_id(absl::StrCat("job-", next_job_number_++, "-", RandomHex(4)));
    *job.mutable_spec() = spec;
    *job.mutable_created() = ToProto(clock_->Now());
    job.set_total_steps(spec.epochs() == 0 ? spec.max_steps() : 0);
    if (const uint64_t samples = TrainSamples(spec); samples > 0) {
      job.set_total_steps(TotalSteps(spec, samples));
      job.set_steps_per_epoch(StepsPerEpoch(spec, samples));
    }
    jobs_.push_back(std::move(job));
    TransitionLocked(jobs_.back(), v1::PENDING,
                     absl::StrCat("submitted: '", spec.name(), "', model ", spec.model().name(),
                                  ", nodes ", spec.nodes_min(), "..", spec.nodes_max()));
    while (jobs_.size() > kMaxJobsKept && IsTerminal(jobs_.front().state())) jobs_.pop_front();
    settle_since_.reset();
    retry_formation_at_ = absl::InfinitePast();
    formation_error_.clear();
    failed_generations_in_a_row_ = 0;
    *reply = jobs_.back();
    RequestWorkLocked();
  }
  SaveState().IgnoreError();
  return absl::OkStatus();
}

void Coordinator::HandleGetJob(const v1::GetJobRequest& request, v1::Job* reply,
                               ReplyCallback done) {
  done(GetJob(request, reply));
}

absl::Status Coordinator::GetJob(const v1::GetJobRequest& request, v1::Job* reply) {
  absl::MutexLock lock(&mu_);
  v1::Job* job = nullptr;
  if (request.job_id().empty()) {
    job = ActiveJobLocked();
    if (job == nullptr && !jobs_.empty()) job = &jobs_.back();
    if (job == nullptr) {
      return absl::NotFoundError("no job has been submitted");
    }
  } else {
    job = FindJobLocked(request.job_id());
    if (job == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown job id '", request.job_id(), "'"));
    }
  }
  *reply = *job;
  FillWaitingReasonLocked(*reply);
  return absl::OkStatus();
}

void Coordinator::FillWaitingReasonLocked(v1::Job& job) const {
  // At most one job is not terminal: the active one.
  if (generation_.active || IsTerminal(job.state()) || job.state() == v1::PAUSED) return;
  job.set_waiting_reason(waiting_reason_);
}

void Coordinator::HandleListJobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* reply,
                                 ReplyCallback done) {
  absl::MutexLock lock(&mu_);
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    v1::Job* job = reply->add_jobs();
    *job = *it;
    job->clear_progress();
    FillWaitingReasonLocked(*job);
  }
  done(absl::OkStatus());
}

void Coordinator::HandlePauseJob(const v1::JobControlRequest& request, v1::Job* reply,
                                 ReplyCallback done) {
  done(PauseJob(request, reply));
}

absl::Status Coordinator::PauseJob(const v1::JobControlRequest& request, v1::Job* reply) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<v1::Job*> job = ControlTargetLocked(request.job_id());
    if (!job.ok()) {
      return job.status();
    }
    if ((*job)->state() != v1::RUNNING && (*job)->state() != v1::RENDEZVOUS) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", (*job)->job_id(), " is ", v1::JobState_Name((*job)->state()),
                       ": only RUNNING or RENDEZVOUS jobs can be paused"));
    }
    TransitionLocked(
        **job, v1::PAUSED,
        absl::StrCat("paused: ", request.reason().empty() ? "PauseJob" : request.reason()));
    generation_.pause_at_step.reset();
    generation_.pause_asked_after = heartbeats_received_;
    *reply = **job;
    RequestWorkLocked();
  }
  SaveState().IgnoreError();
  return absl::OkStatus();
}

void Coordinator::HandleResumeJob(const v1::JobControlRequest& request, v1::Job* reply,
                                  ReplyCallback done) {
  done(ResumeJob(request, reply));
}

absl::Status Coordinator::ResumeJob(const v1::JobControlRequest& request, v1::Job* reply) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<v1::Job*> job = ControlTargetLocked(request.job_id());
    if (!job.ok()) {
      return job.status();
    }
    if ((*job)->state() != v1::PAUSED) {
      return absl::FailedPreconditionError(absl::StrCat("job ", (*job)->job_id(), " is ",
                                                        v1::JobState_Name((*job)->state()),
                                                        ": only a PAUSED job can be resumed"));
    }
    const bool running = generation_.active && generation_.job_id == (*job)->job_id();
    generation_.pause_at_step.reset();
    const std::string why = request.reason().empty() ? "ResumeJob" : request.reason();
    TransitionLocked(**job, running ? v1::RUNNING : v1::RENDEZVOUS,
                     running ? absl::StrCat("resumed: ", why)
                             : absl::StrCat("resumed: ", why, "; forming a new generation"));
    settle_since_.reset();
    *reply = **job;
    RequestWorkLocked();
  }
  SaveState().IgnoreError();
  return absl::OkStatus();
}

void Coordinator::HandleStopJob(const v1::JobControlRequest& request, v1::Job* reply,
                                ReplyCallback done) {
  done(StopJob(request, reply));
}

absl::Status Coordinator::StopJob(const v1::JobControlRequest& request, v1::Job* reply) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<v1::Job*> job = ControlTargetLocked(request.job_id());
    if (!job.ok()) {
      return job.status();
    }
    if (IsTerminal((*job)->state())) {
      return absl::FailedPreconditionError(absl::StrCat("job ", (*job)->job_id(), " is already ",
                                                        v1::JobState_Name((*job)->state())));
    }
    FinishJobLocked(
        **job, v1::STOPPED,
        absl::StrCat("stopped: ", request.reason().empty() ? "StopJob" : request.reason()));
    *reply = **job;
  }
  SaveState().IgnoreError();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------
// Cluster picture

v1::WorkerInfo Coordinator::WorkerInfoLocked(const WorkerRecord& worker, absl::Time now) const {
  v1::WorkerInfo info;
  const v1::RegisterWorkerRequest& registration = worker.registration;
  info.set_worker_id(worker.id);
  info.set_node_name(registration.node_name());
  info.set_host(registration.host());
  info.set_grpc_port(registration.grpc_port());
  info.set_http_port(registration.http_port());
  *info.mutable_devices() = registration.devices();
  if (InGenerationLocked(worker.id)) {
    *info.mutable_assignment() = generation_.assignments.at(worker.id);
    info.mutable_assignment()->clear_job();  // The job is shown once, not per worker.
  }
  info.set_phase(worker.phase);
  info.set_heartbeat_age_seconds(absl::ToDoubleSeconds(now - worker.last_heartbeat));
  info.set_step(worker.report.step());
  info.set_loss(worker.report.loss());
  info.set_samples_per_second(worker.report.samples_per_second());
  info.set_step_seconds(worker.report.step_seconds());
  info.set_push_wait_seconds(worker.report.push_wait_seconds());
  info.set_error(!worker.report.error().empty() ? worker.report.error() : worker.note);
  *info.mutable_registered() = ToProto(worker.registered);
  info.set_bytes_pushed(worker.report.bytes_pushed());
  info.set_bytes_pulled(worker.report.bytes_pulled());
  info.set_pid(registration.pid());
  return info;
}

v1::ClusterStatus Coordinator::ClusterStatusLocked(absl::Time now) const {
  v1::ClusterStatus status;
  *status.mutable_now() = ToProto(now);
  status.set_coordinator_version(options_.version);
  const v1::Job* shown = nullptr;
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && shown == nullptr; ++it) {
    if (!IsTerminal(it->state())) shown = &*it;
  }
  if (shown == nullptr && !jobs_.empty()) shown = &jobs_.back();
  if (shown != nullptr) {
    *status.mutable_job() = *shown;
    FillWaitingReasonLocked(*status.mutable_job());
  }
  status.set_generation(generation_.active ? generation_.number : 0);

  // Straggler: step time well above the generation's median (the lower one for an
  // even count, so one slow worker of two stands out).
  std::vector<double> step_times;
  for (const auto& [id, assignment] : generation_.assignments) {
    auto worker = workers_.find(id);
    if (worker != workers_.end() && worker->second.report.step_seconds() > 0) {
      step_times.push_back(worker->second.report.step_seconds());
    }
  }
  double median = 0;
  if (step_times.size() >= 2) {
    std::sort(step_times.begin(), step_times.end());
    median = step_times[(step_times.size() - 1) / 2];
  }
  if (generation_.active) {
    for (uint32_t rank = 0; rank < generation_.node_names.size(); ++rank) {
      v1::NodeInfo* node = status.add_nodes();
      node->set_node_name(generation_.node_names[rank]);
      node->set_node_rank(rank);
      node->set_rendezvous_id(generation_.rendezvous_ids[rank]);
      std::vector<std::pair<uint32_t, std::string>> members;
      for (const auto& [id, assignment] : generation_.assignments) {
        if (assignment.node_rank() == rank) members.push_back({assignment.local_rank(), id});
      }
      std::sort(members.begin(), members.end());
      for (const auto& [local_rank, id] : members) {
        auto worker = workers_.find(id);
        if (worker == workers_.end()) continue;
        v1::WorkerInfo* info = node->add_workers();
        *info = WorkerInfoLocked(worker->second, now);
        info->set_straggler(median > 0 &&
                            info->step_seconds() > options_.straggler_factor * median);
      }
    }
  }
  std::vector<const WorkerRecord*> idle;
  for (const auto& [id, worker] : workers_) {
    if (!InGenerationLocked(id)) idle.push_back(&worker);
  }
  std::sort(idle.begin(), idle.end(),
            [](const WorkerRecord* a, const WorkerRecord* b) { return a->sequence < b->sequence; });
  for (const WorkerRecord* worker : idle)
    *status.add_idle_workers() = WorkerInfoLocked(*worker, now);
  for (const auto& [index, shard] : shards_) *status.add_shards() = shard.summary;
  status.set_expected_shards(options_.ps_shards);
  if (shown != nullptr && shown->state() == v1::PAUSED) {
    status.set_waiting_reason(absl::StrCat("job ", shown->job_id(), " is paused"));
  } else if (!generation_.active && shown != nullptr && !IsTerminal(shown->state())) {
    status.set_waiting_reason(waiting_reason_);
  } else if (shown == nullptr) {
    status.set_waiting_reason("no job submitted");
  }
  return status;
}

void Coordinator::HandleListWorkers(const v1::ListWorkersRequest& request,
                                    v1::ListWorkersResponse* reply, ReplyCallback done) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<const WorkerRecord*> ordered;
  for (const auto& [id, worker] : workers_) ordered.push_back(&worker);
  std::sort(ordered.begin(), ordered.end(),
            [](const WorkerRecord* a, const WorkerRecord* b) { return a->sequence < b->sequence; });
  for (const WorkerRecord* worker : ordered) *reply->add_workers() = WorkerInfoLocked(*worker, now);
  done(absl::OkStatus());
}

void Coordinator::HandleGetClusterStatus(const v1::GetClusterStatusRequest& request,
                                         v1::ClusterStatus* reply, ReplyCallback done) {
  *reply = GetClusterStatus();
  done(absl::OkStatus());
}

v1::ClusterStatus Coordinator::GetClusterStatus() {
  absl::MutexLock lock(&mu_);
  return ClusterStatusLocked(clock_->Now());
}

Coordinator::Counters Coordinator::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

// ---------------------------------------------------------------------------------
// Background work

void Coordinator::Tick() {
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    answers.swap(after_tick_);
    ExpireSilentWorkersLocked(clock_->Now());
  }
  FormGenerationIfDue();

  std::set<std::string> jobs_to_end;
  std::vector<v1::ShardInfo> shards;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (!jobs_to_end_.empty() && now >= next_end_job_attempt_) {
      jobs_to_end = jobs_to_end_;
      for (const auto& [index, shard] : shards_) shards.push_back(shard.info);
      // A shard that stays away is asked again every few seconds, not every pass.
      next_end_job_attempt_ = now + std::max(options_.formation_retry, absl::Seconds(5));
    }
  }
  for (const std::string& job_id : jobs_to_end) {
    bool all_done = true;
    for (const v1::ShardInfo& shard : shards) {
      absl::Status ended = shard_client_->EndJob(shard, job_id);
      if (!ended.ok() && !absl::IsNotFound(ended)) {
        all_done = false;
        LOG(WARNING) << "EndJob(" << job_id << ") on PS shard " << shard.shard_index() << ": "
                     << ended;
      }
    }
    if (all_done) {
      absl::MutexLock lock(&mu_);
      jobs_to_end_.erase(job_id);
    }
  }
  SaveStateIfDue();
  for (auto& answer : answers) answer();
}

void Coordinator::WaitForWork(absl::Duration max) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&work_requested_), max);
  work_requested_ = false;
}

// ---------------------------------------------------------------------------------
// Persistence

void Coordinator::MarkDirtyLocked(bool urgent) {
  ++state_version_;
  if (urgent) save_urgent_ = true;
}

absl::Status Coordinator::SaveState() {
  if (state_file_ == nullptr) return absl::OkStatus();
  absl::MutexLock save_lock(&save_mu_);
  CoordinatorState snapshot;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    version = state_version_;
    if (version <= saved_version_) return absl::OkStatus();
    snapshot.set_format_version(1);
    snapshot.set_next_job_number(next_job_number_);
    snapshot.set_last_generation(last_generation_);
    for (const v1::Job& job : jobs_) *snapshot.add_jobs() = job;
    for (const auto& [index, shard] : shards_) *snapshot.add_shards() = shard.info;
    snapshot_version_ = version;
    save_urgent_ = false;
    last_save_ = clock_->Now();
  }
  absl::Status saved = state_file_->Save(snapshot);
  absl::MutexLock lock(&mu_);
  if (saved.ok()) {
    saved_version_ = version;
    ++counters_.state_saves;
  } else {
    ++counters_.state_save_errors;
    LOG(ERROR) << "cannot save the coordinator state: " << saved;
  }
  return saved;
}

void Coordinator::SaveStateIfDue() {
  {
    absl::MutexLock lock(&mu_);
    if (state_file_ == nullptr || state_version_ == snapshot_version_) return;
    if (!save_urgent_ && clock_->Now() - last_save_ < options_.state_save_interval) return;
  }
  SaveState().IgnoreError();
}

}  // namespace tributary::coordinator
