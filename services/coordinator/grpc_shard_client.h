// ShardClient over gRPC: one channel per shard address (common/channel.h, so TLS and
// keepalive match every other client), every call bounded by a deadline.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_GRPC_SHARD_CLIENT_H_
#define TRIBUTARY_SERVICES_COORDINATOR_GRPC_SHARD_CLIENT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "proto/parameter_server.grpc.pb.h"
#include "services/coordinator/shard_client.h"

namespace tributary::coordinator {

class GrpcShardClient : public ShardClient {
 public:
  GrpcShardClient(ChannelOptions options, absl::Duration timeout);

  absl::StatusOr<v1::ShardStatus> GetShardStatus(const v1::ShardInfo& shard) override;
  absl::StatusOr<v1::BeginGenerationResponse> BeginGeneration(
      const v1::ShardInfo& shard, const v1::BeginGenerationRequest& request) override;
  absl::Status EndJob(const v1::ShardInfo& shard, const std::string& job_id) override;
  absl::StatusOr<v1::RestoreJobResponse> RestoreJob(
      const v1::ShardInfo& shard, const v1::RestoreJobRequest& request) override;

 private:
  absl::StatusOr<v1::ParameterServer::Stub*> Stub(const v1::ShardInfo& shard);

  const ChannelOptions options_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_GRPC_SHARD_CLIENT_H_
