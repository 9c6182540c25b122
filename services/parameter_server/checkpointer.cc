#include "services/parameter_server/checkpointer.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/thread_name.h"
#include "services/parameter_server/crc32c.h"

namespace tributary::ps {

Checkpointer::Checkpointer(int keep, ShardMetrics& metrics, const Clock* clock, TakeSnapshot take)
    : keep_(keep), metrics_(metrics), clock_(clock), take_(std::move(take)) {
  thread_ = std::thread([this] {
    NameThisThread("checkpoint");
    Loop();
  });
}

Checkpointer::~Checkpointer() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::Write(const Exclusive& /*exclusive*/,
                                                           const ShardCheckpoint& const_snapshot,
                                                           const std::string& dir) {
  ShardCheckpoint snapshot = const_snapshot;
  {
    // Names sort by time; never reuse or go back in time (clock steps, fast retries).
    absl::MutexLock lock(&last_mu_);
    last_written_micros_ = std::max(absl::ToUnixMicros(clock_->Now()), last_written_micros_ + 1);
    snapshot.meta.set_written_unix_micros(last_written_micros_);
  }
  const std::string shard_dir = ShardDirectory(dir, snapshot.meta.shard_index());
  absl::StatusOr<WrittenCheckpoint> written = WriteCheckpoint(shard_dir, snapshot);
  if (!written.ok()) {
    metrics_.checkpoints_error.Increment();
    LOG(ERROR) << "checkpoint of step " << snapshot.meta.step() << " failed: " << written.status();
    return written.status();
  }
  PruneCheckpoints(shard_dir, keep_);
  metrics_.checkpoints_ok.Increment();
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&last_mu_);
    last_path_ = written->path;
    last_step_ = snapshot.meta.step();
    last_time_ = now;
  }
  metrics_.last_checkpoint_timestamp_seconds.Set(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  metrics_.checkpoint_age_seconds.Set(0);
  LOG(INFO) << "checkpoint of job '" << snapshot.meta.job_id() << "' step " << snapshot.meta.step()
            << " generation " << snapshot.meta.generation()
            << (snapshot.meta.job_ended() ? " (final)" : "") << " written to " << written->path
            << " (" << written->bytes << " bytes, crc32c " << Crc32cHex(written->crc32c) << ")";
  v1::CheckpointResponse response;
  response.set_path(written->path);
  response.set_step(snapshot.meta.step());
  response.set_generation(snapshot.meta.generation());
  response.set_bytes(written->bytes);
  response.set_checksum(Crc32cHex(written->crc32c));
  return response;
}

std::optional<v1::CheckpointResponse> Checkpointer::LastOnDemand(const std::string& job_id,
                                                                 uint64_t generation,
                                                                 uint64_t step) const {
  absl::MutexLock lock(&last_mu_);
  if (!on_demand_.has_value() || on_demand_job_ != job_id ||
      on_demand_->generation() != generation || on_demand_->step() != step ||
      last_path_ != on_demand_->path()) {
    return std::nullopt;  // Another job, step or generation, or a newer file since.
  }
  return on_demand_;
}

absl::Duration Checkpointer::OnDemandWait(absl::Duration min_interval) const {
  absl::MutexLock lock(&last_mu_);
  const absl::Duration since = clock_->Now() - on_demand_time_;
  return since >= min_interval ? absl::ZeroDuration() : min_interval - since;
}

void Checkpointer::RememberOnDemand(const std::string& job_id,
                                    const v1::CheckpointResponse& response) {
  absl::MutexLock lock(&last_mu_);
  on_demand_job_ = job_id;
  on_demand_ = response;
  on_demand_time_ = clock_->Now();
}

void Checkpointer::Request(uint64_t step) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(step);
  backlog_.fetch_add(1, std::memory_order_relaxed);
}

void Checkpointer::AwaitBacklogAtMost(size_t n) {
  if (backlog_.load(std::memory_order_relaxed) <= n) return;
  metrics_.checkpoint_backlog_waits.Increment();
  absl::MutexLock lock(&queue_mu_);
  auto small = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return stopping_ || queue_.size() + (busy_ ? 1 : 0) <= n;
  };
  if (!queue_mu_.AwaitWithTimeout(absl::Condition(&small), kBacklogWait)) {
    LOG_EVERY_N(WARNING, 100) << queue_.size() + (busy_ ? 1 : 0)
                              << " periodic checkpoints still waiting for the writer after "
                              << absl::FormatDuration(kBacklogWait)
                              << " (a slow or stuck checkpoint directory?); training goes on";
  }
}

void Checkpointer::Flush() {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](Checkpointer* self)
           ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->queue_.empty() && !self->busy_; },
      this));
}

void Checkpointer::Loop() {
  while (true) {
    uint64_t step;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](Checkpointer* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (queue_.empty()) return;
      step = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    {
      Exclusive exclusive = Exclusively();
      std::optional<absl::StatusOr<Pending>> pending = take_(step);
      if (pending.has_value() && pending->ok()) {
        (void)Write(exclusive, (*pending)->snapshot, (*pending)->dir);  // Logged and counted inside.
      } else if (pending.has_value()) {
        metrics_.checkpoints_error.Increment();
        LOG(ERROR) << "periodic checkpoint of step " << step << " failed: " << pending->status();
      }
    }
    absl::MutexLock lock(&queue_mu_);
    busy_ = false;
    backlog_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Checkpointer::Restored(const std::string& path, const CheckpointMeta& meta) {
  {
    absl::MutexLock lock(&last_mu_);
    restored_from_ = path;
    last_path_ = path;
    last_step_ = meta.step();
    last_time_ = absl::FromUnixMicros(meta.written_unix_micros());
    last_written_micros_ = std::max(last_written_micros_, meta.written_unix_micros());
  }
  metrics_.last_checkpoint_timestamp_seconds.Set(
      static_cast<double>(meta.written_unix_micros()) / 1e6);
  RefreshGauges();
}

void Checkpointer::FreshJob() {
  {
    absl::MutexLock lock(&last_mu_);
    restored_from_.clear();
    last_path_.clear();
    last_step_ = 0;
    last_time_ = absl::InfinitePast();
    // last_written_micros_ stays: write times only go forward.
  }
  metrics_.checkpoint_age_seconds.Set(-1);
  metrics_.last_checkpoint_timestamp_seconds.Set(0);
}

std::string Checkpointer::restored_from() const {
  absl::MutexLock lock(&last_mu_);
  return restored_from_;
}

Checkpointer::Last Checkpointer::last() const {
  absl::MutexLock lock(&last_mu_);
  Last last;
  last.path = last_path_;
  last.step = last_step_;
  if (last_time_ != absl::InfinitePast()) {
    last.age_seconds = absl::ToDoubleSeconds(clock_->Now() - last_time_);
  }
  return last;
}

void Checkpointer::RefreshGauges() {
  absl::MutexLock lock(&last_mu_);
  if (last_time_ != absl::InfinitePast()) {
    metrics_.checkpoint_age_seconds.Set(absl::ToDoubleSeconds(clock_->Now() - last_time_));
  }
}

}  // namespace tributary::ps
