// ParameterShard's control side: Pull (also of ended jobs, from their checkpoints),
// ShardStatus, checkpoints (what goes into one, and rewinding to one), EndJob and the
// restore at start-up.
#include <glog/logging.h>

#include <algorithm>

#include <google/protobuf/util/message_differencer.h>

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
  absl::MutexLock writer_lock(&checkpointer_.writer_mutex());
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
  absl::StatusOr<v1::CheckpointResponse> written = checkpointer_.Write(*snapshot, dir);
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
  const std::string shard_dir = ShardDirectory(dir, job.shard_index);
  // The step is in the file name (checkpoint_file.cc); the meta is checked below.
  const std::string marker = absl::StrFormat("-step-%012d", step);
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    if (path.find(marker) == std::string::npos) continue;
    absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
    if (!read.ok()) {
      LOG(WARNING) << "rewind to step " << step << ": skipping " << read.status();
      continue;
    }
    const CheckpointMeta& meta = read->meta;
    if (meta.job_id() != job.job_id || meta.plan().fingerprint() != job.plan.fingerprint() ||
        meta.shard_index() != job.shard_index || meta.step() != step ||
        meta.partitions_size() != static_cast<int>(job.partitions.size())) {
      LOG(WARNING) << "rewind to step " << step << ": " << path << " is of job '" << meta.job_id()
                   << "' shard " << meta.shard_index() << " step " << meta.step()
                   << ", not this job's; skipping";
      continue;
    }
    const int slots = job.optimizer.state_slots();
    for (int i = 0; i < meta.partitions_size(); ++i) {
      ShardPartition& p = *job.partitions[i];
      if (meta.partitions(i).id() != p.id ||
          read->partitions[i].state.size() != p.length * static_cast<size_t>(slots)) {
        return absl::DataLossError(
            absl::StrCat(path, ": partition entry ", i, " does not match partition ", p.id));
      }
    }
    for (int i = 0; i < meta.partitions_size(); ++i) {
      ShardPartition& p = *job.partitions[i];
      absl::MutexLock partition_lock(&p.mu);
      p.Retire(std::move(p.values));
      p.values = std::const_pointer_cast<v1::PartitionValues>(read->partitions[i].values);
      p.state = std::move(read->partitions[i].state);
      p.prev_values.reset();
      p.step = step;
    }
    LOG(WARNING) << "shard " << job.shard_index << ": rewound job '" << job.job_id << "' to step "
                 << step << " from " << path << " (another shard resumed from its checkpoint)";
    return static_cast<uint32_t>(meta.partitions_size());
  }
  return absl::NotFoundError(
      absl::StrCat("no intact checkpoint of step ", step, " in ", shard_dir));
}

// ---------------------------------------------------------------------------------
// EndJob and restore

absl::StatusOr<v1::EndJobResponse> ParameterShard::EndJob(const v1::EndJobRequest& request) {
  absl::MutexLock writer_lock(&checkpointer_.writer_mutex());
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
    absl::StatusOr<v1::CheckpointResponse> written = checkpointer_.Write(*snapshot, dir);
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
  absl::MutexLock writer_lock(&checkpointer_.writer_mutex());
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
  // The earlier job's intact checkpoints, newest first; the step is in the file name,
  // the meta checked once read.
  constexpr int kMaxListed = 64;
  std::optional<LoadedCheckpoint> chosen;
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    if (!request.list_only() &&
        path.find(absl::StrFormat("-step-%012d", request.step())) == std::string::npos) {
      continue;
    }
    absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
    if (!read.ok()) {
      LOG(WARNING) << what << ": skipping " << read.status();
      continue;
    }
    const CheckpointMeta& meta = read->meta;
    if (meta.job_id() != request.from_job_id() ||
        meta.shard_index() != static_cast<uint32_t>(shard_index_)) {
      continue;
    }
    if (request.list_only()) {
      if (response.steps_size() < kMaxListed) response.add_steps(meta.step());
      continue;
    }
    if (meta.step() != request.step()) continue;
    chosen = LoadedCheckpoint{path, *std::move(read)};
    break;
  }
  if (request.list_only()) return response;
  if (!chosen.has_value()) {
    return absl::NotFoundError(absl::StrCat(what, ": no intact checkpoint of step ",
                                            request.step(), " of job '", request.from_job_id(),
                                            "' in ", shard_dir));
  }
  // The earlier job's parameters, state, plan and step, as the new job: its plan must
  // be the one this job's workers will make (same model, partition_bytes and shards).
  CheckpointMeta& meta = chosen->checkpoint.meta;
  const v1::JobSpec earlier = WithDefaults(meta.job());
  std::string differs;
  if (!google::protobuf::util::MessageDifferencer::Equals(earlier.model(), spec.model())) {
    differs = absl::StrCat("model ", earlier.model().ShortDebugString(), ", this job's ",
                           spec.model().ShortDebugString());
  } else if (meta.plan().partition_bytes() != spec.partition_bytes()) {
    differs = absl::StrCat("partition_bytes ", meta.plan().partition_bytes(), ", this job's ",
                           spec.partition_bytes());
  } else if (request.num_shards() != 0 && meta.plan().num_shards() != request.num_shards()) {
    differs = absl::StrCat(meta.plan().num_shards(), " PS shards, this job's ",
                           request.num_shards());
  }
  if (!differs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the checkpoint ", chosen->path, " is of a job with ", differs,
                     ": resume with the earlier job's model, partition_bytes and shards, or "
                     "start from its parameters alone (init_from)"));
  }
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(PsOptimizerSpec(spec), 1);
  if (!optimizer.ok()) return optimizer.status();
  for (const PartitionCheckpoint& partition : meta.partitions()) {
    if (static_cast<int>(partition.state_slots()) != optimizer->state_slots()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the checkpoint ", chosen->path, " holds ", partition.state_slots(),
          " optimizer state slot(s) per parameter (", v1::OptimizerType_Name(PsOptimizerSpec(meta.job()).type()),
          "), this job's PS optimizer ", v1::OptimizerType_Name(PsOptimizerSpec(spec).type()),
          " needs ", optimizer->state_slots(),
          ": resume with the same optimizer, or start from the parameters alone (init_from)"));
    }
  }
  meta.set_job_id(request.job_id());
  *meta.mutable_job() = spec;
  meta.set_generation(0);
  meta.set_num_nodes(request.num_nodes() > 0 ? request.num_nodes() : spec.nodes_min());
  meta.set_job_ended(false);
  if (absl::Status installed = InstallCheckpoint(chosen->path, std::move(chosen->checkpoint));
      !installed.ok()) {
    return installed;
  }
  LOG(INFO) << "shard " << shard_index_ << ": job '" << request.job_id() << "' resumes job '"
            << request.from_job_id() << "' at step " << request.step() << " from "
            << chosen->path;
  response.set_step(ShardStepLocked());
  response.set_restored_from(chosen->path);
  return response;
}

absl::StatusOr<std::string> ParameterShard::RestoreFromCheckpointDirectory() {
  if (options_.checkpoint_dir.empty()) return std::string();
  absl::MutexLock writer_lock(&checkpointer_.writer_mutex());
  absl::MutexLock lock(&mu_);
  int index = shard_index_;
  if (index < 0) {
    const std::vector<uint32_t> shards = ShardsWithCheckpoints(options_.checkpoint_dir);
    if (shards.empty()) return std::string();
    if (shards.size() > 1) {
      LOG(WARNING) << options_.checkpoint_dir << " holds checkpoints of shards "
                   << absl::StrJoin(shards, ",")
                   << "; pass --shard_index to restore one of them. Starting empty.";
      return std::string();
    }
    index = static_cast<int>(shards[0]);
  }
  const std::string shard_dir = ShardDirectory(options_.checkpoint_dir, index);
  std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(shard_dir, nullptr);
  if (!loaded.has_value()) {
    LOG(INFO) << "no intact checkpoint in " << shard_dir << "; starting empty";
    return std::string();
  }
  if (loaded->checkpoint.meta.job_ended()) {
    LOG(INFO) << "newest checkpoint " << loaded->path << " is the final one of ended job '"
              << loaded->checkpoint.meta.job_id() << "'; starting empty";
    return std::string();
  }
  if (absl::Status installed = InstallCheckpoint(loaded->path, std::move(loaded->checkpoint));
      !installed.ok()) {
    return installed;
  }
  return loaded->path;
}

absl::Status ParameterShard::InstallCheckpoint(const std::string& path,
                                               ShardCheckpoint checkpoint) {
  const CheckpointMeta& meta = checkpoint.meta;
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", what));
  };
  if (absl::Status valid = ValidatePartitionPlan(meta.plan()); !valid.ok()) {
    return corrupt(std::string(valid.message()));
  }
  absl::StatusOr<Optimizer> optimizer =
      Optimizer::Create(PsOptimizerSpec(meta.job()), meta.total_steps());
  if (!optimizer.ok()) return corrupt(std::string(optimizer.status().message()));
  const std::vector<uint32_t> owned = PartitionsOfShard(meta.plan(), meta.shard_index());
  if (owned.size() != static_cast<size_t>(meta.partitions_size()) || meta.num_nodes() == 0 ||
      meta.num_nodes() > kMaxNodes) {
    return corrupt(absl::StrCat("holds ", meta.partitions_size(), " partitions for ",
                                meta.num_nodes(), " nodes, the plan gives shard ",
                                meta.shard_index(), " ", owned.size()));
  }
  std::unique_ptr<Aggregator> aggregator = MakeAggregator(meta.job().mode(), Context());
  JobSource source;
  source.job_id = meta.job_id();
  source.spec = meta.job();
  source.plan = meta.plan();
  source.total_steps = meta.total_steps();
  source.shard_index = meta.shard_index();
  source.generation = meta.generation();
  source.num_nodes = meta.num_nodes();
  const int slots = optimizer->state_slots();
  for (int i = 0; i < meta.partitions_size(); ++i) {
    const PartitionCheckpoint& info = meta.partitions(i);
    const v1::Partition& spec = meta.plan().partitions(static_cast<int>(owned[i]));
    if (info.id() != spec.id() || info.length() != spec.length() ||
        static_cast<int>(info.state_slots()) != slots) {
      return corrupt(absl::StrCat("partition entry ", i, " (id ", info.id(), ", length ",
                                  info.length(), ", ", info.state_slots(),
                                  " state slots) does not match the plan and optimizer"));
    }
    JobSource::Seed& seed = source.partitions.emplace_back();
    seed.partition = spec;
    seed.values = std::const_pointer_cast<v1::PartitionValues>(checkpoint.partitions[i].values);
    seed.state = std::move(checkpoint.partitions[i].state);
    seed.step = aggregator->RestoredStep(*seed.values, info.step());
    seed.skipped_non_finite = info.skipped_non_finite();
  }
  absl::StatusOr<std::unique_ptr<ShardJob>> job =
      BuildShardJob(std::move(source), *std::move(optimizer), std::move(aggregator));
  if (!job.ok()) return corrupt(std::string(job.status().message()));
  InstallLocked(*std::move(job));
  checkpointer_.Restored(path, meta);
  LOG(INFO) << "shard " << job_->shard_index << ": restored job '" << job_->job_id << "' at step "
            << meta.step() << ", generation " << meta.generation() << " from " << path;
  return absl::OkStatus();
}

}  // namespace tributary::ps
