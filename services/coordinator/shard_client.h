// What the coordinator asks of the parameter-server shards: their status (for the
// dashboard and the resume step), the start of a generation, the end of a job, and
// the checkpoint a resuming job starts from.
// An interface so the core's tests use an in-memory fake; grpc_shard_client.h is the
// real one.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_SHARD_CLIENT_H_
#define TRIBUTARY_SERVICES_COORDINATOR_SHARD_CLIENT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/parameter_server.pb.h"

namespace tributary::coordinator {

class ShardClient {
 public:
  virtual ~ShardClient() = default;
  // Each call names the shard (index and address) in its errors.
  virtual absl::StatusOr<v1::ShardStatus> GetShardStatus(const v1::ShardInfo& shard) = 0;
  virtual absl::StatusOr<v1::BeginGenerationResponse> BeginGeneration(
      const v1::ShardInfo& shard, const v1::BeginGenerationRequest& request) = 0;
  virtual absl::Status EndJob(const v1::ShardInfo& shard, const std::string& job_id) = 0;
  // For a job resuming an earlier one: list the earlier job's checkpoint steps on the
  // shard, or install one (RestoreJobRequest.list_only).
  virtual absl::StatusOr<v1::RestoreJobResponse> RestoreJob(
      const v1::ShardInfo& shard, const v1::RestoreJobRequest& request) = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_SHARD_CLIENT_H_
