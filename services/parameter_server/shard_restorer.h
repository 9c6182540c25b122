// What a shard makes of its checkpoint files, without the shard's locks or state:
// which file a restore reads (RestoreJob, the start-up restore, the SYNC rewind), the
// reason an earlier job's checkpoint does not fit a job that resumes it, and the job
// a checkpoint holds, built for installing (ShardJob). ParameterShard takes the
// checkpoints' exclusive access and its own lock around these, and installs.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_RESTORER_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_RESTORER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/aggregator.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/shard_job.h"

namespace tributary::ps {

// A job read back from a checkpoint, ready to install.
struct RestoredJob {
  std::string path;            // The checkpoint file.
  CheckpointMeta meta;         // Its meta (as adopted, for RestoreJob).
  std::unique_ptr<ShardJob> job;
};

class ShardRestorer {
 public:
  // The aggregator of a training mode, wired to the shard (MakeAggregator).
  using AggregatorFactory = std::function<std::unique_ptr<Aggregator>(v1::TrainingMode)>;
  explicit ShardRestorer(AggregatorFactory make_aggregator)
      : make_aggregator_(std::move(make_aggregator)) {}

  // The steps of job_id's intact checkpoints of shard `shard_index` in shard_dir,
  // newest first, at most `max`.
  std::vector<uint64_t> Steps(const std::string& shard_dir, const std::string& job_id,
                              uint32_t shard_index, int max) const;

  // The intact checkpoint of job_id, shard `shard_index`, at `step` in shard_dir
  // (with plan_fingerprint set: of that plan too, and of `partitions` partitions when
  // that is >= 0); NOT_FOUND naming the step and the directory. Files that do not read
  // back or are another's are skipped, logged.
  absl::StatusOr<LoadedCheckpoint> OfStep(const std::string& shard_dir, const std::string& job_id,
                                          uint32_t shard_index, uint64_t step,
                                          const std::string* plan_fingerprint = nullptr,
                                          int partitions = -1) const;

  // RestoreJob: the earlier job's checkpoint of request.step() as the job `spec`
  // (request.job_id(), generation 0, request.num_nodes() or spec.nodes_min()).
  // NOT_FOUND without one; FAILED_PRECONDITION naming what differs when its model,
  // partition_bytes or shard count is not this job's; INVALID_ARGUMENT when its
  // optimizer state does not fit this job's PS optimizer. `what` prefixes errors.
  absl::StatusOr<RestoredJob> ForResume(const v1::RestoreJobRequest& request,
                                        const v1::JobSpec& spec, const std::string& shard_dir,
                                        uint32_t shard_index, const std::string& what) const;

  // Start-up: the newest intact checkpoint under checkpoint_dir of shard
  // `shard_index` (-1: of the only shard directory there), unless it is an ended
  // job's final one; nullopt (the reason logged) when there is nothing to restore.
  absl::StatusOr<std::optional<RestoredJob>> AtStartup(const std::string& checkpoint_dir,
                                                       int shard_index) const;

  // The job a checkpoint holds. DATA_LOSS naming the path when the file does not
  // fit its own plan and optimizer.
  absl::StatusOr<RestoredJob> JobOf(const std::string& path, ShardCheckpoint checkpoint) const;

 private:
  AggregatorFactory make_aggregator_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_RESTORER_H_
