// The Coordinator facade's background work (coordinator.h): progress and the pause
// boundary, polling the shards, the periodic Tick (expiry, pending timeouts, formation,
// job endings on the shards, saving), and the histories and state on disk.
#include <glog/logging.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/history_file.h"

namespace tributary::coordinator {
namespace {

std::string Seconds(absl::Duration duration) {
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(duration));
}

}  // namespace

// ---------------------------------------------------------------------------------
// Progress

void Coordinator::UpdateProgressLocked(absl::Time now) {
  v1::Job* job = jobs_.Find(generation_.job_id);
  if (!generation_.active || job == nullptr || IsTerminal(job->state())) return;
  const JobBook::Progress progress = jobs_.RecordProgress(
      *job, generation_.number, generation_.resume_step, ReportViewsLocked(), now);
  if (JobHistory* history = histories_.Find(job->job_id())) {
    history->CompleteThrough(job->step(), now);
  }
  if (progress.all_training && job->state() == v1::RENDEZVOUS) {
    jobs_.Transition(
        *job, v1::RUNNING,
        absl::StrCat("all ", generation_.assignments.size(), " worker(s) of generation ",
                     generation_.number, " are training from step ", generation_.resume_step),
        now);
  }
  if (progress.all_finished) CompleteJobLocked(*job);
}

std::optional<uint64_t> Coordinator::PauseBoundaryLocked() {
  if (generation_.pause_at_step.has_value()) return generation_.pause_at_step;
  // Known once every worker of the generation holds somewhere: the highest of their
  // boundaries (SYNC nodes stand at most one step apart, bounded-staleness ones at most
  // `staleness`), so that none holds before a step whose push another one waits for.
  uint64_t boundary = 0;
  for (const auto& [id, assignment] : generation_.assignments) {
    const WorkerRecord* worker = workers_.Find(id);
    if (worker == nullptr || !worker->reported ||
        worker->report_number <= generation_.pause_asked_after) {
      return std::nullopt;
    }
    const v1::HeartbeatRequest& report = worker->report;
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

void Coordinator::PollShards() {
  std::vector<v1::ShardInfo> shards;
  std::string active_job;
  {
    absl::MutexLock lock(&mu_);
    shards = shards_.All();
    if (const v1::Job* job = jobs_.Active()) active_job = job->job_id();
  }
  for (const v1::ShardInfo& shard : shards) {
    absl::StatusOr<v1::ShardStatus> status = shard_client_->GetShardStatus(shard);
    std::string action_error;
    if (status.ok() && !active_job.empty() && !status->job_id().empty() &&
        status->job_id() != active_job) {
      // A job this coordinator no longer runs: free the shard for the active one.
      absl::Status ended = shard_client_->EndJob(shard, status->job_id());
      if (!ended.ok() && !absl::IsNotFound(ended)) {
        action_error = absl::StrCat("EndJob(", status->job_id(), "): ", ended.message());
      }
    }
    absl::MutexLock lock(&mu_);
    if (shards_.RecordPoll(shard, status, action_error) && !action_error.empty()) {
      LOG_EVERY_N(WARNING, 20) << "PS shard " << shard.shard_index() << ": " << action_error;
    }
  }
}

Coordinator::Counters Coordinator::counters() const {
  absl::MutexLock lock(&mu_);
  Counters counters = counters_;
  counters.state_saves = snapshotter_.saves();
  counters.state_save_errors = snapshotter_.save_errors();
  return counters;
}

// ---------------------------------------------------------------------------------
// Background work

void Coordinator::Tick() {
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    answers.swap(after_tick_);
    const absl::Time now = clock_->Now();
    // A job that asked not to wait for ever for its first generation.
    if (v1::Job* job = jobs_.Active(); job != nullptr && job->state() == v1::PENDING &&
                                       job->spec().pending_timeout_seconds() > 0) {
      const absl::Duration limit = absl::Seconds(job->spec().pending_timeout_seconds());
      const absl::Time created = FromProto(job->created());
      if (now - created >= limit) {
        const std::string waiting = planner_.waiting_reason();
        FinishJobLocked(*job, v1::FAILED,
                        absl::StrCat("no generation formed within ", Seconds(limit),
                                     " of submission (pending_timeout_seconds)",
                                     waiting.empty() ? std::string() : ": " + waiting));
      }
    }
    // A worker whose endpoint registered again and that has not sent a heartbeat since
    // (three intervals): the process a restart replaced.
    for (const std::string& id : workers_.Replaced(now, 3 * options_.heartbeat_interval)) {
      const WorkerRecord& worker = *workers_.Find(id);
      const std::string reason = absl::StrCat(
          DescribeWorker(id, worker.registration),
          " sent no heartbeat since another registration came from its endpoint (restarted)");
      LOG(INFO) << reason << "; removing it";
      RemoveWorkerLocked(id, reason, "worker_left", false);
    }
    for (const std::string& id : workers_.Silent(now, options_.heartbeat_timeout)) {
      const WorkerRecord& worker = *workers_.Find(id);
      const std::string reason =
          absl::StrCat(DescribeWorker(id, worker.registration), " missed heartbeats for ",
                       Seconds(now - worker.last_heartbeat),
                       " (--heartbeat_timeout=", Seconds(options_.heartbeat_timeout), ")");
      LOG(WARNING) << reason << "; removing it";
      RemoveWorkerLocked(id, reason, "worker_timeout", false);
    }
  }
  FormGenerationIfDue();

  std::set<std::string> jobs_to_end;
  std::vector<v1::ShardInfo> shards;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (!jobs_to_end_.empty() && now >= next_end_job_attempt_) {
      jobs_to_end = jobs_to_end_;
      shards = shards_.All();
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
  bool save = false;
  {
    absl::MutexLock lock(&mu_);
    save = snapshotter_.Due();
  }
  if (save) SaveState().IgnoreError();
  SaveHistories(false);
  for (auto& answer : answers) answer();
}

void Coordinator::RecordHistoryLocked(const std::string& worker_id,
                                      const v1::HeartbeatRequest& request, absl::Time now) {
  // Only a member of the generation it reports counts: the current one, or the one
  // that just ended (its last bytes).
  const Generation* generation = nullptr;
  for (const Generation* candidate : {&generation_, &previous_generation_}) {
    if (candidate->number != 0 && candidate->number == request.generation() &&
        candidate->assignments.count(worker_id) > 0) {
      generation = candidate;
      break;
    }
  }
  if (generation == nullptr || jobs_.Find(generation->job_id) == nullptr) return;
  JobHistory& history = histories_.For(generation->job_id);
  history.CountTraffic(worker_id, request.generation(), request.bytes_pushed(),
                       request.bytes_pulled());
  const WorkerRecord* worker = workers_.Find(worker_id);
  if (generation == &generation_ && generation_.active && worker != nullptr &&
      (request.steps_size() > 0 || request.evaluations_size() > 0)) {
    ReportingWorker who;
    who.worker_id = worker_id;
    who.node_name = worker->registration.node_name();
    who.global_rank = generation_.assignments.at(worker_id).global_rank();
    history.AddReports(who, request, now);
  }
  histories_.MarkChanged(generation->job_id, false);
}

void Coordinator::SaveHistories(bool now) {
  std::vector<v1::JobHistory> changed;
  std::vector<std::string> dropped;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time time = clock_->Now();
    dropped = histories_.Retain(jobs_.jobs());
    if (now || histories_.Due(time, options_.state_save_interval)) {
      changed = histories_.TakeChanged(time);
    }
  }
  if (options_.state_dir.empty()) return;
  for (const v1::JobHistory& history : changed) {
    if (absl::Status saved = SaveHistoryFile(options_.state_dir, history); !saved.ok()) {
      LOG_EVERY_N(WARNING, 20) << "history of job " << history.job_id() << ": " << saved;
    }
  }
  for (const std::string& job_id : dropped) {
    if (absl::Status removed = RemoveHistoryFile(options_.state_dir, job_id); !removed.ok()) {
      LOG(WARNING) << removed;
    }
  }
}

void Coordinator::Flush() {
  SaveHistories(true);
  SaveState().IgnoreError();
}

void Coordinator::WaitForWork(absl::Duration max) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&work_requested_), max);
  work_requested_ = false;
}

absl::Status Coordinator::SaveState() {
  return snapshotter_.Save(mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    CoordinatorState snapshot;
    snapshot.set_format_version(1);
    snapshot.set_next_job_number(jobs_.next_job_number());
    snapshot.set_last_generation(last_generation_);
    for (const v1::Job& job : jobs_.jobs()) *snapshot.add_jobs() = job;
    for (const v1::ShardInfo& info : shards_.All()) *snapshot.add_shards() = info;
    return snapshot;
  });
}

}  // namespace tributary::coordinator
