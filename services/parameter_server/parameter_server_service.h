// The gRPC face of a shard: tributary.v1.ParameterServer on the callback API, a thin
// adaptor over ParameterShard. Each PushPull stream is a reactor that hands every
// push to the PartitionExecutor lane of its partition (so gRPC's threads only move
// bytes), queues the values the shard sends it and converts statuses at the edge.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SERVER_SERVICE_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/cluster_auth.h"
#include "common/stream_deadlines.h"
#include "services/parameter_server/node_credential_book.h"
#include "proto/parameter_server.grpc.pb.h"
#include "services/parameter_server/data_plane.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"

namespace tributary::ps {

// The InitPartitions streams that are open, for expiring stalled ones.
// The generated callback service with PushPull taking raw messages (grpc::ByteBuffer):
// its pushes are read and its values written by common/partition_codec without
// protobuf copies. The method, its proto types and reflection stay as they are, so
// any protobuf client calls it as before.
using ParameterServerCallbackBase = v1::ParameterServer::WithCallbackMethod_InitPartitions<
    v1::ParameterServer::WithRawCallbackMethod_PushPull<
        v1::ParameterServer::WithCallbackMethod_Pull<
            v1::ParameterServer::WithCallbackMethod_GetShardStatus<
                v1::ParameterServer::WithCallbackMethod_Checkpoint<
                    v1::ParameterServer::WithCallbackMethod_BeginGeneration<
                        v1::ParameterServer::WithCallbackMethod_EndJob<
                            v1::ParameterServer::WithCallbackMethod_RestoreJob<
                                v1::ParameterServer::WithCallbackMethod_OpenDataPlane<
                                    v1::ParameterServer::Service>>>>>>>>>;

template <typename Request, typename Response>
struct ControlCall;

class ParameterServerService final : public ParameterServerCallbackBase {
 public:
  // shard and executor are not owned and must outlive the service and the server it
  // is registered with (shut the server down first). With an `auth`
  // (--cluster_token_file) every call needs the cluster credential of a role that makes
  // it: InitPartitions, PushPull and OpenDataPlane a worker's, with the node credential
  // of the node the stream speaks for (whose digest the coordinator's BeginGeneration
  // brought: NodeCredentialBook); Pull a worker, the coordinator or the operator; GetShardStatus
  // and Checkpoint the coordinator or the operator; BeginGeneration, EndJob and
  // RestoreJob the coordinator.
  // InitPartitions streams still open after `init_timeout` are cancelled by
  // ExpireStalledInits (their buffered values freed). `clock` null: the real clock.
  ParameterServerService(ParameterShard* shard, PartitionExecutor* executor,
                         std::shared_ptr<const ClusterAuth> auth = nullptr,
                         absl::Duration init_timeout = absl::Minutes(5),
                         const Clock* clock = nullptr);
  ~ParameterServerService() override;

  // Cancels InitPartitions streams open longer than the timeout (a caller that stopped
  // sending but keeps its connection): call periodically. How many were cancelled.
  int ExpireStalledInits() { return open_inits_.Expire(); }

  // The shard's TCP data plane, whose tickets OpenDataPlane issues (not owned; null,
  // the default: OpenDataPlane answers FAILED_PRECONDITION). Set before serving.
  void set_data_plane(DataPlaneServer* data_plane) { data_plane_ = data_plane; }
  size_t open_inits() const { return open_inits_.size(); }

  grpc::ServerReadReactor<v1::InitPartitionsRequest>* InitPartitions(
      grpc::CallbackServerContext* context, v1::InitPartitionsResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PushPull(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::PartitionValues>* Pull(grpc::CallbackServerContext* context,
                                                      const v1::PullRequest* request) override;
  grpc::ServerUnaryReactor* GetShardStatus(grpc::CallbackServerContext* context,
                                           const v1::GetShardStatusRequest* request,
                                           v1::ShardStatus* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const v1::CheckpointRequest* request,
                                       v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* BeginGeneration(grpc::CallbackServerContext* context,
                                            const v1::BeginGenerationRequest* request,
                                            v1::BeginGenerationResponse* response) override;
  grpc::ServerUnaryReactor* EndJob(grpc::CallbackServerContext* context,
                                   const v1::EndJobRequest* request,
                                   v1::EndJobResponse* response) override;
  grpc::ServerUnaryReactor* RestoreJob(grpc::CallbackServerContext* context,
                                       const v1::RestoreJobRequest* request,
                                       v1::RestoreJobResponse* response) override;
  grpc::ServerUnaryReactor* OpenDataPlane(grpc::CallbackServerContext* context,
                                          const v1::OpenDataPlaneRequest* request,
                                          v1::OpenDataPlaneResponse* response) override;

 private:
  // One control call (Checkpoint, BeginGeneration, EndJob, RestoreJob), as its entry
  // in the table of them says: authorized, then `admit`ted, then run on the control
  // lane and finished from there.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Control(
      grpc::CallbackServerContext* context, const Request* request, Response* response,
      const ControlCall<Request, Response>& call,
      absl::FunctionRef<absl::Status()> admit = [] { return absl::OkStatus(); });
  // The node credentials a stream must present; null without cluster credentials.
  const NodeCredentialBook* NodeCredentials() const;

  ParameterShard* shard_;
  PartitionExecutor* executor_;
  const std::shared_ptr<const ClusterAuth> auth_;
  StreamDeadlines open_inits_;
  DataPlaneServer* data_plane_ = nullptr;
  // With an auth_: who may speak for which node of the generations begun here.
  NodeCredentialBook node_credentials_;
  // Calls that write files or wait for a job to install run here, not on gRPC's
  // callback threads.
  PartitionExecutor control_{1, "ps-control"};
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PARAMETER_SERVER_SERVICE_H_
