// A shard's checkpoints: writes them (checkpoint_file.h) under a writer lock, keeps
// the newest --checkpoints_to_keep, writes the periodic ones on its own thread, and
// remembers the last one for ShardStatus and the checkpoint gauges. What goes into a
// checkpoint is the shard's (ParameterShard::Snapshot); when is the shard's step
// bookkeeping's (every checkpoint_interval_steps of the lowest partition step).
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINTER_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINTER_H_

#include <cstdint>
#include <atomic>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/shard_metrics.h"

namespace tributary::ps {

class Checkpointer {
 public:
  struct Pending {
    ShardCheckpoint snapshot;
    std::string dir;  // The checkpoint directory (the shard's folder is made inside).
  };
  // For the writer thread: the snapshot of `step` to write, nullopt when there is
  // nothing to write (no job, no directory). Runs with the writer lock held.
  using TakeSnapshot = std::function<std::optional<absl::StatusOr<Pending>>(uint64_t step)>;

  // `metrics` and `clock` are not owned. Starts the writer thread.
  Checkpointer(int keep, ShardMetrics& metrics, const Clock* clock, TakeSnapshot take);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Exclusive use of the checkpoints while it lives: taken before the shard's own
  // lock by whatever takes and writes a snapshot, restores one or replaces the job, so
  // that checkpoints are written one at a time and in order, and none is written of
  // a job being replaced. The writer thread holds one while it writes.
  class [[nodiscard]] Exclusive {
   public:
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    friend class Checkpointer;
    explicit Exclusive(absl::Mutex* mu) : lock_(mu) {}
    absl::MutexLock lock_;
  };
  Exclusive Exclusively() { return Exclusive(&writer_mu_); }
  // Writes `snapshot`: counted, logged, the oldest pruned.
  absl::StatusOr<v1::CheckpointResponse> Write(const Exclusive& exclusive,
                                               const ShardCheckpoint& snapshot,
                                               const std::string& dir);

  // Queues a periodic checkpoint of `step` for the writer thread.
  void Request(uint64_t step);
  // Waits (up to kBacklogWait) until at most `n` periodic checkpoints are queued or
  // being written. Cheap when they are: one atomic load.
  void AwaitBacklogAtMost(size_t n);
  static constexpr absl::Duration kBacklogWait = absl::Seconds(10);
  // Blocks until the queued checkpoints are written (tests, shutdown).
  void Flush();

  // The shard now holds the job of the checkpoint at `path`.
  void Restored(const std::string& path, const CheckpointMeta& meta);
  // The shard now holds a new job from the workers: nothing of the previous job's
  // checkpoints is its (last(), tributary_ps_checkpoint_age_seconds -1 and
  // tributary_ps_last_checkpoint_timestamp_seconds 0 until it writes its first).
  void FreshJob();
  std::string restored_from() const;

  // The last on-demand checkpoint, when it is of this job, generation and step.
  std::optional<v1::CheckpointResponse> LastOnDemand(const std::string& job_id,
                                                     uint64_t generation, uint64_t step) const;
  // How long until another on-demand checkpoint may be written (zero: now).
  absl::Duration OnDemandWait(absl::Duration min_interval) const;
  void RememberOnDemand(const std::string& job_id, const v1::CheckpointResponse& response);

  struct Last {
    std::string path;  // Empty: none written or restored yet.
    uint64_t step = 0;
    double age_seconds = -1;  // -1: none.
  };
  Last last() const;
  // Refreshes tributary_ps_checkpoint_age_seconds.
  void RefreshGauges();

 private:
  void Loop();

  const int keep_;
  ShardMetrics& metrics_;
  const Clock* clock_;
  const TakeSnapshot take_;

  absl::Mutex writer_mu_;

  mutable absl::Mutex last_mu_;
  std::string last_path_ ABSL_GUARDED_BY(last_mu_);
  uint64_t last_step_ ABSL_GUARDED_BY(last_mu_) = 0;
  absl::Time last_time_ ABSL_GUARDED_BY(last_mu_) = absl::InfinitePast();
  int64_t last_written_micros_ ABSL_GUARDED_BY(last_mu_) = 0;
  std::string restored_from_ ABSL_GUARDED_BY(last_mu_);
  std::string on_demand_job_ ABSL_GUARDED_BY(last_mu_);
  std::optional<v1::CheckpointResponse> on_demand_ ABSL_GUARDED_BY(last_mu_);
  absl::Time on_demand_time_ ABSL_GUARDED_BY(last_mu_) = absl::InfinitePast();

  absl::Mutex queue_mu_;
  std::deque<uint64_t> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool busy_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::atomic<size_t> backlog_{0};  // queue_.size() + busy_, for the lock-free check.
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread thread_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINTER_H_
