// ParameterShard's control side: Pull (also of ended jobs, from their checkpoints),
// ShardStatus, checkpoints (what goes into one, and rewinding to one), EndJob and the
// restore at start-up.
#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/confined_path.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "services/parameter_server/parameter_shard.h"

namespace tributary::ps {

// ---------------------------------------------------------------------------------
// Pull

absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> ParameterShard::Pull(
    const v1::PullRequest& request) const {
  std::string checkpoint_dir;
  uint32_t shard_index = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    const ShardJob* held = job_ != nullptr ? job_.get() : ended_job_.get();
    const bool holds =
        (job_ != nullptr && job_->job_id == request.job_id()) ||
        (job_ == nullptr && ended_job_ != nullptr && ended_job_->job_id == request.job_id());
    if (!holds && shard_index_ >= 0 && IsJobId(request.job_id())) {
      // Not the job in memory: its newest checkpoint here, if any (export of a job
      // that ended before another was installed, or before this shard restarted).
      checkpoint_dir = options_.checkpoint_dir;
      if (held != nullptr) {
        absl::StatusOr<std::string> dir = JobCheckpointDir(held->spec);
        checkpoint_dir = dir.ok() ? *dir : std::string();
      }
      shard_index = static_cast<uint32_t>(shard_index_);
    }
  }
  if (!checkpoint_dir.empty()) {
    absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> saved =
        PullFromCheckpoint(request, checkpoint_dir, shard_index);
    if (saved.ok() || saved.status().code() != absl::StatusCode::kNotFound) return saved;
  }
  absl::ReaderMutexLock lock(&mu_);
  const ShardJob* job = job_.get();
  if (job == nullptr && ended_job_ != nullptr && ended_job_->job_id == request.job_id()) {
    job = ended_job_.get();  // Its final parameters.
  }
  if (job == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("Pull for job '", request.job_id(),
                                                      "': shard ", shard_index_,
                                                      " holds no job (InitPartitions first)"));
  }
  if (request.job_id() != job->job_id) {
    return absl::FailedPreconditionError(absl::StrCat("Pull for job '", request.job_id(),
                                                      "' but shard ", job->shard_index,
                                                      " holds job '", job->job_id, "'"));
  }
  std::vector<ShardPartition*> wanted;
  if (request.partition_ids().empty()) {
    for (auto& partition : job->partitions) wanted.push_back(partition.get());
  } else {
    for (uint32_t id : request.partition_ids()) {
      auto found = job->by_id.find(id);
      if (found == job->by_id.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Pull: partition ", id, " is not owned by shard ", job->shard_index));
      }
      wanted.push_back(found->second);
    }
  }
  std::vector<std::shared_ptr<const v1::PartitionValues>> values;
  values.reserve(wanted.size());
  for (ShardPartition* partition : wanted) {
    absl::MutexLock partition_lock(&partition->mu);
    values.push_back(partition->values);
  }
  return values;
}

absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>>
ParameterShard::PullFromCheckpoint(const v1::PullRequest& request, const std::string& dir,
                                   uint32_t shard_index) const {
  const std::string shard_dir = ShardDirectory(dir, shard_index);
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    absl::StatusOr<ShardCheckpoint> checkpoint = ReadCheckpoint(path);
    if (!checkpoint.ok() || checkpoint->meta.job_id() != request.job_id()) continue;
    std::vector<std::shared_ptr<const v1::PartitionValues>> values;
    for (uint32_t id : request.partition_ids()) {
      bool found = false;
      for (const PartitionData& data : checkpoint->partitions) {
        if (data.values->partition_id() == id) {
          values.push_back(data.values);
          found = true;
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat("Pull: partition ", id, " is not in shard ",
                                                       shard_index, "'s checkpoint ", path));
      }
    }
    if (request.partition_ids().empty()) {
      for (const PartitionData& data : checkpoint->partitions) values.push_back(data.values);
    }
    LOG(INFO) << "Pull for job '" << request.job_id() << "' served from checkpoint " << path;
    return values;
  }
  return absl::NotFoundError(
      absl::StrCat("no checkpoint of job '", request.job_id(), "' in ", shard_dir));
}

void ParameterShard::RecordPulledBytes(size_t bytes) {
  metrics_.bytes_out.Increment(static_cast<double>(bytes));
}

// ---------------------------------------------------------------------------------
// Status

v1::ShardStatus ParameterShard::Status() const {
  v1::ShardStatus status;
  absl::ReaderMutexLock lock(&mu_);
  status.set_shard_index(shard_index_ < 0 ? 0 : static_cast<uint32_t>(shard_index_));
  status.set_bytes_in(static_cast<uint64_t>(metrics_.bytes_in.Value()));
  status.set_bytes_out(static_cast<uint64_t>(metrics_.bytes_out.Value()));
  status.set_pushes_accepted(static_cast<uint64_t>(metrics_.pushes_accepted.Value()));
  status.set_pushes_duplicate(static_cast<uint64_t>(metrics_.pushes_duplicate.Value()));
  status.set_pushes_rejected(metrics_.RejectedTotal());
  status.set_updates_applied(static_cast<uint64_t>(metrics_.updates_applied.Value()));
  status.set_updates_skipped_non_finite(
      static_cast<uint64_t>(metrics_.updates_skipped_non_finite.Value()));
  const Checkpointer::Last last = checkpointer_.last();
  status.set_last_checkpoint(last.path);
  status.set_last_checkpoint_step(last.step);
  status.set_checkpoint_age_seconds(last.age_seconds);
  const ShardJob* shown = job_ != nullptr ? job_.get() : ended_job_.get();
  if (shown == nullptr) return status;
  const ShardJob& job = *shown;
  status.set_job_id(job.job_id);
  status.set_job_ended(job_ == nullptr);
  status.set_generation(job.generation);
  status.set_mode(job.mode);
  status.set_partition_cut(StoredPartitionCut(job.spec));
  status.set_num_nodes(job.num_nodes);
  uint64_t lowest = UINT64_MAX;
  uint64_t waits = 0;
  double wait_seconds = 0;
  uint64_t max_staleness = 0;
  for (const auto& partition : job.partitions) {
    ShardPartition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    lowest = std::min(lowest, p.step);
    waits += p.aggregation_waits;
    wait_seconds += p.aggregation_wait_seconds;
    max_staleness = std::max(max_staleness, p.max_staleness_applied);
    v1::PartitionStatus* out = status.add_partitions();
    out->set_partition_id(p.id);
    out->set_offset(p.offset);
    out->set_length(static_cast<int64_t>(p.length));
    out->set_version(p.values->version());
    out->set_step(p.step);
    out->set_skipped_non_finite(p.skipped_non_finite);
    if (p.aggregation_waits > 0) {
      out->set_aggregation_wait_seconds(p.aggregation_wait_seconds / p.aggregation_waits);
    }
    for (uint32_t node = 0; node < job.num_nodes; ++node) {
      if (job.aggregator->WaitingFor(p, node)) out->add_waiting_for(node);
    }
  }
  status.set_step(job_ != nullptr ? ShardStepLocked() : (job.partitions.empty() ? 0 : lowest));
  status.set_aggregation_wait_seconds(waits == 0 ? 0.0 : wait_seconds / waits);
  status.set_max_staleness_applied(max_staleness);
  return status;
}

// ---------------------------------------------------------------------------------
// Checkpoints

absl::StatusOr<std::string> ParameterShard::JobCheckpointDir(const v1::JobSpec& spec) const {
  if (spec.checkpoint_dir().empty()) return options_.checkpoint_dir;
  const std::string& root =
      options_.checkpoint_root.empty() ? options_.checkpoint_dir : options_.checkpoint_root;
  return ConfinePath("checkpoint_dir", spec.checkpoint_dir(), root, root, "--checkpoint_root");
}

std::string ParameterShard::CheckpointDirLocked() const {
  if (job_ == nullptr) return options_.checkpoint_dir;
  absl::StatusOr<std::string> dir = JobCheckpointDir(job_->spec);
  if (!dir.ok()) {
    // Only a job restored from an older checkpoint can get here (InitPartitions
    // refuses such a job): it gets no checkpoints rather than files elsewhere.
    LOG(ERROR) << "job '" << job_->job_id << "': " << dir.status().message()
               << "; not writing checkpoints";
    return std::string();
  }
  return *dir;
}

absl::StatusOr<ShardCheckpoint> ParameterShard::Snapshot(uint64_t step, bool job_ended,
                                                         bool captured) const {
  const ShardJob& job = *job_;
  ShardCheckpoint snapshot;
  CheckpointMeta& meta = snapshot.meta;
  meta.set_job_id(job.job_id);
  *meta.mutable_job() = job.spec;
  *meta.mutable_plan() = job.plan;
  meta.set_shard_index(job.shard_index);
  meta.set_total_steps(job.total_steps);
  meta.set_generation(job.generation);
  meta.set_num_nodes(job.num_nodes);
  meta.set_step(step);
  meta.set_job_ended(job_ended);
  const uint32_t slots = static_cast<uint32_t>(job.optimizer.state_slots());
  for (const auto& partition : job.partitions) {
    ShardPartition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    std::optional<Aggregator::Saved> saved;
    if (captured) {
      // Older captures were for checkpoints that have been written or given up.
      while (!p.captures.empty() && p.captures.front().step < step) p.captures.pop_front();
      if (!p.captures.empty() && p.captures.front().step == step) {
        saved = Aggregator::Saved{std::move(p.captures.front().data), step};
        p.captures.pop_front();
      }
    }
    if (!saved.has_value()) saved = job.aggregator->ValuesAt(p, step);
    if (!saved.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot checkpoint step ", step, ": partition ", p.id, " has moved on to step ", p.step));
    }
    PartitionCheckpoint* info = meta.add_partitions();
    info->set_id(p.id);
    info->set_length(static_cast<int64_t>(p.length));
    info->set_state_slots(slots);
    info->set_version(saved->data.values->version());
    info->set_step(saved->step);
    info->set_skipped_non_finite(p.skipped_non_finite);
    snapshot.partitions.push_back(std::move(saved->data));
  }
  return snapshot;
}

std::optional<absl::StatusOr<Checkpointer::Pending>> ParameterShard::PeriodicSnapshot(
    uint64_t step) {
  if (options_.before_periodic_checkpoint) options_.before_periodic_checkpoint(step);
  absl::ReaderMutexLock lock(&mu_);
  if (job_ == nullptr) return std::nullopt;
  const std::string dir = CheckpointDirLocked();
  if (dir.empty()) return std::nullopt;
  if (step > ShardStepLocked()) {
    LOG(INFO) << "periodic checkpoint of step " << step << " skipped: the job was rolled back to "
              << ShardStepLocked();
    return std::nullopt;
  }
  absl::StatusOr<ShardCheckpoint> snapshot = Snapshot(step, /*job_ended=*/false, /*captured=*/true);
  if (!snapshot.ok()) {
    // ASYNC partitions (their steps are not in lockstep), or a capture dropped: the
    // step they are at.
    LOG(WARNING) << "periodic checkpoint: " << snapshot.status().message()
                 << "; checkpointing the current step instead";
    snapshot = Snapshot(ShardStepLocked(), /*job_ended=*/false);
  }
  if (!snapshot.ok()) return snapshot.status();
  return Checkpointer::Pending{*std::move(snapshot), dir};
}

absl::StatusOr<v1::CheckpointResponse> ParameterShard::Checkpoint() {
  Checkpointer::Exclusive exclusive = checkpointer_.Exclusively();
  absl::StatusOr<ShardCheckpoint> snapshot;
  std::string dir;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (job_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("Checkpoint: shard ", shard_index_, " holds no job"));
    }
    dir = CheckpointDirLocked();
    if (dir.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Checkpoint: no checkpoint directory (set --checkpoint_dir or the job's "
                       "checkpoint_dir) for job '",
                       job_->job_id, "'"));
    }
    const uint64_t step = ShardStepLocked();
    if (std::optional<v1::CheckpointResponse> same =
            checkpointer_.LastOnDemand(job_->job_id, job_->generation, step);
        same.has_value()) {
      return *same;  // Nothing moved since: the same file answers.
    }
    if (absl::Duration wait = checkpointer_.OnDemandWait(options_.min_checkpoint_interval);
        wait > absl::ZeroDuration()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Checkpoint: at most one on-demand checkpoint per ",
          absl::FormatDuration(options_.min_checkpoint_interval),
          " (--min_checkpoint_interval_seconds); try again in ", absl::FormatDuration(wait)));
    }
    snapshot = Snapshot(step, /*job_ended=*/false);
  }
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<v1::CheckpointResponse> written = checkpointer_.Write(exclusive, *snapshot, dir);
  if (written.ok()) checkpointer_.RememberOnDemand(snapshot->meta.job_id(), *written);
  return written;
}

void ParameterShard::FlushCheckpoints() { checkpointer_.Flush(); }

void ParameterShard::RefreshGauges() { checkpointer_.RefreshGauges(); }

absl::StatusOr<uint32_t> ParameterShard::RewindToCheckpointLocked(uint64_t step) {
  ShardJob& job = *job_;
  // A checkpoint still waiting for the writer: its captured values and state.
  bool captured = !job.partitions.empty();
  for (auto& partition : job.partitions) {
    absl::MutexLock partition_lock(&partition->mu);
    auto& captures = partition->captures;
    captured =
        captured && std::any_of(captures.begin(), captures.end(),
                                [&](const ShardPartition::Capture& c) { return c.step == step; });
  }
  if (captured) {
    for (auto& partition : job.partitions) {
      ShardPartition& p = *partition;
      absl::MutexLock partition_lock(&p.mu);
      for (const ShardPartition::Capture& capture : p.captures) {
        if (capture.step != step) continue;
        p.Retire(std::move(p.values));
        p.values = std::const_pointer_cast<v1::PartitionValues>(capture.data.values);
        p.state = capture.data.state;
        p.prev_values.reset();
        p.step = step;
      }
    }
    LOG(WARNING) << "shard " << job.shard_index << ": rewound job '" << job.job_id << "' to step "
                 << step << " from the checkpoint of it not yet written (another shard resumed "
                 << "from its checkpoint)";
    return static_cast<uint32_t>(job.partitions.size());
  }
  const std::string dir = CheckpointDirLocked();
  if (dir.empty()) return absl::NotFoundError("the shard has no checkpoint directory");
  absl::StatusOr<LoadedCheckpoint> read = restorer_.OfStep(
      ShardDirectory(dir, job.shard_index), job.job_id, job.shard_index, step,
      &job.plan.fingerprint(), static_cast<int>(job.partitions.size()));
  if (!read.ok()) return read.status();
  const CheckpointMeta& meta = read->checkpoint.meta;
  const int slots = job.optimizer.state_slots();
  for (int i = 0; i < meta.partitions_size(); ++i) {
    ShardPartition& p = *job.partitions[i];
    if (meta.partitions(i).id() != p.id ||
        read->checkpoint.partitions[i].state.size() != p.length * static_cast<size_t>(slots)) {
      return absl::DataLossError(
          absl::StrCat(read->path, ": partition entry ", i, " does not match partition ", p.id));
    }
  }
  for (int i = 0; i < meta.partitions_size(); ++i) {
    ShardPartition& p = *job.partitions[i];
    absl::MutexLock partition_lock(&p.mu);
    p.Retire(std::move(p.values));
    p.values = std::const_pointer_cast<v1::PartitionValues>(read->checkpoint.partitions[i].values);
    p.state = std::move(read->checkpoint.partitions[i].state);
    p.prev_values.reset();
    p.step = step;
  }
  LOG(WARNING) << "shard " << job.shard_index << ": rewound job '" << job.job_id << "' to step "
               << step << " from " << read->path << " (another shard resumed from its checkpoint)";
  return static_cast<uint32_t>(meta.partitions_size());
}

// ---------------------------------------------------------------------------------
// EndJob and restore

absl::StatusOr<v1::EndJobResponse> ParameterShard::EndJob(const v1::EndJobRequest& request) {
  Checkpointer::Exclusive exclusive = checkpointer_.Exclusively();
  absl::StatusOr<ShardCheckpoint> snapshot;
  std::string dir;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (job_ == nullptr || job_->job_id != request.job_id()) {
      return absl::NotFoundError(
          absl::StrCat("EndJob: job '", request.job_id(), "' is not on shard ", shard_index_,
                       job_ == nullptr ? std::string(" (no job installed)")
                                       : absl::StrCat(" (it holds job '", job_->job_id, "')")));
    }
    dir = CheckpointDirLocked();
    if (!dir.empty()) snapshot = Snapshot(ShardStepLocked(), /*job_ended=*/true);
  }
  v1::EndJobResponse response;
  if (!dir.empty()) {
    if (!snapshot.ok()) return snapshot.status();
    absl::StatusOr<v1::CheckpointResponse> written = checkpointer_.Write(exclusive, *snapshot, dir);
    if (!written.ok()) return written.status();  // Keep the job: EndJob can be retried.
    response.set_final_checkpoint(written->path());
  }
  absl::MutexLock lock(&mu_);
  if (job_ == nullptr || job_->job_id != request.job_id()) return response;  // Raced: done.
  sinks_.EndAll(absl::FailedPreconditionError(
      absl::StrCat("job '", job_->job_id, "' ended on shard ", job_->shard_index)));
  LOG(INFO) << "shard " << job_->shard_index << ": job '" << job_->job_id << "' ended"
            << (response.final_checkpoint().empty()
                    ? std::string()
                    : absl::StrCat("; final checkpoint ", response.final_checkpoint()));
  ended_job_ = std::move(job_);
  {
    absl::MutexLock steps_lock(&steps_mu_);
    partitions_at_step_.Clear();
    last_reported_step_ = 0;
  }
  metrics_.partitions.Set(0);
  return response;
}

absl::StatusOr<v1::RestoreJobResponse> ParameterShard::RestoreJob(
    const v1::RestoreJobRequest& request) {
  const std::string what =
      absl::StrCat("RestoreJob of job '", request.job_id(), "' from job '", request.from_job_id(),
                   "'");
  if (!IsJobId(request.job_id()) || !IsJobId(request.from_job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("RestoreJob: job_id and from_job_id must be 1-128 characters of "
                     "[A-Za-z0-9._-]"));
  }
  if (request.num_nodes() > kMaxNodes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": num_nodes ", request.num_nodes(),
                                                   " is above ", kMaxNodes));
  }
  const v1::JobSpec spec = WithDefaults(request.job());
  if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", valid.message()));
  }
  absl::StatusOr<std::string> dir = JobCheckpointDir(spec);
  if (!dir.ok()) return dir.status();
  Checkpointer::Exclusive exclusive = checkpointer_.Exclusively();
  absl::MutexLock lock(&mu_);
  v1::RestoreJobResponse response;
  if (job_ != nullptr) {
    // The coordinator asking again (a retried formation): already done.
    const uint64_t step = ShardStepLocked();
    if (job_->job_id == request.job_id() && (request.list_only() || step == request.step())) {
      // Listed as the one step it can resume from, so that a restore that failed on
      // another shard can be retried at this step.
      if (request.list_only()) response.add_steps(step);
      response.set_step(step);
      return response;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": shard ", job_->shard_index, " holds job '", job_->job_id, "' at step ", step));
  }
  if (dir->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": no checkpoint directory (neither the job's checkpoint_dir nor "
                           "this shard's --checkpoint_dir)"));
  }
  if (shard_index_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this shard has no index yet (not registered)"));
  }
  const std::string shard_dir = ShardDirectory(*dir, static_cast<uint32_t>(shard_index_));
  if (request.list_only()) {
    constexpr int kMaxListed = 64;
    for (uint64_t step : restorer_.Steps(shard_dir, request.from_job_id(),
                                         static_cast<uint32_t>(shard_index_), kMaxListed)) {
      response.add_steps(step);
    }
    return response;
  }
  absl::StatusOr<RestoredJob> restored = restorer_.ForResume(
      request, spec, shard_dir, static_cast<uint32_t>(shard_index_), what);
  if (!restored.ok()) return restored.status();
  response.set_restored_from(restored->path);
  InstallRestoredLocked(*std::move(restored));
  LOG(INFO) << "shard " << shard_index_ << ": job '" << request.job_id() << "' resumes job '"
            << request.from_job_id() << "' at step " << request.step() << " from "
            << response.restored_from();
  response.set_step(ShardStepLocked());
  return response;
}

absl::StatusOr<std::string> ParameterShard::RestoreFromCheckpointDirectory() {
  if (options_.checkpoint_dir.empty()) return std::string();
  Checkpointer::Exclusive exclusive = checkpointer_.Exclusively();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::optional<RestoredJob>> restored =
      restorer_.AtStartup(options_.checkpoint_dir, shard_index_);
  if (!restored.ok()) return restored.status();
  if (!restored->has_value()) return std::string();
  const std::string path = (*restored)->path;
  InstallRestoredLocked(**std::move(restored));
  return path;
}

void ParameterShard::InstallRestoredLocked(RestoredJob restored) {
  const uint64_t step = restored.meta.step();
  InstallLocked(std::move(restored.job));
  checkpointer_.Restored(restored.path, restored.meta);
  LOG(INFO) << "shard " << job_->shard_index << ": restored job '" << job_->job_id << "' at step "
            << step << ", generation " << restored.meta.generation() << " from " << restored.path;
}

}  // namespace tributary::ps
