// The thin gRPC edge of the coordinator (callback API): each RPC becomes one call of
// a CoordinatorHandler and its reply callback becomes Finish(), with the status
// converted by common/grpc_status.h. The control token is checked here, since it is
// carried in gRPC metadata. WaitRendezvous holds no thread while it waits.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_GRPC_SERVICE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_GRPC_SERVICE_H_

#include <optional>
#include <string>

#include "common/cluster_auth.h"
#include "common/clock.h"
#include "common/issued_credentials.h"
#include "common/stream_deadlines.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/coordinator/coordinator_handler.h"
#include "services/coordinator/model_store.h"

namespace tributary::coordinator {

// How long an UploadModel stream may stay open, in all and without a message
// (--upload_timeout, --upload_idle_timeout): a silent upload holds one of the model
// store's upload slots and what it sent.
struct UploadLimits {
  absl::Duration total = absl::Minutes(10);
  absl::Duration idle = absl::Seconds(30);
};

class CoordinatorGrpcService : public v1::Coordinator::CallbackService {
 public:
  // `handler` and `models` are not owned; `models` may be null (UploadModel and
  // FetchModel then answer UNIMPLEMENTED). With a `control_token`, SubmitJob,
  // UploadModel, PauseJob, ResumeJob and StopJob need "authorization: Bearer <token>".
  // With an `auth` (--cluster_token_file) the internal calls need the cluster credential
  // of their role: workers register, heartbeat, deregister, rendezvous and fetch models;
  // PS shards register; ListWorkers and FetchModel also serve the operator role. A
  // worker's own calls (Heartbeat, Deregister) also need the worker credential that
  // `issuer` made for its id (x-tributary-worker); with an `auth` and no `issuer` they
  // are refused.
  CoordinatorGrpcService(CoordinatorHandler* handler, std::optional<std::string> control_token,
                         ModelStore* models = nullptr,
                         std::shared_ptr<const ClusterAuth> auth = nullptr,
                         std::shared_ptr<const CredentialIssuer> issuer = nullptr,
                         UploadLimits upload_limits = UploadLimits(),
                         const Clock* clock = nullptr);

  // Cancels UploadModel streams past their limits (UploadLimits): call periodically.
  // How many were cancelled.
  int ExpireStalledUploads() { return uploads_.Expire(); }
  size_t open_uploads() const { return uploads_.size(); }

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const v1::RegisterWorkerRequest* request,
                                           v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Deregister(grpc::CallbackServerContext* context,
                                       const v1::DeregisterRequest* request,
                                       v1::DeregisterResponse* response) override;
  grpc::ServerUnaryReactor* RegisterParameterServer(
      grpc::CallbackServerContext* context, const v1::RegisterParameterServerRequest* request,
      v1::RegisterParameterServerResponse* response) override;
  grpc::ServerUnaryReactor* PublishRendezvous(grpc::CallbackServerContext* context,
                                              const v1::PublishRendezvousRequest* request,
                                              v1::PublishRendezvousResponse* response) override;
  grpc::ServerUnaryReactor* WaitRendezvous(grpc::CallbackServerContext* context,
                                           const v1::WaitRendezvousRequest* request,
                                           v1::WaitRendezvousResponse* response) override;
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJobHistory(grpc::CallbackServerContext* context,
                                          const v1::GetJobHistoryRequest* request,
                                          v1::JobHistory* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* PauseJob(grpc::CallbackServerContext* context,
                                     const v1::JobControlRequest* request,
                                     v1::Job* response) override;
  grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* context,
                                      const v1::JobControlRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* StopJob(grpc::CallbackServerContext* context,
                                    const v1::JobControlRequest* request,
                                    v1::Job* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const v1::GetClusterStatusRequest* request,
                                             v1::ClusterStatus* response) override;
  grpc::ServerReadReactor<v1::UploadModelRequest>* UploadModel(
      grpc::CallbackServerContext* context, v1::UploadModelResponse* response) override;
  grpc::ServerWriteReactor<v1::ModelChunk>* FetchModel(
      grpc::CallbackServerContext* context, const v1::FetchModelRequest* request) override;

 private:
  // False after finishing the call with UNAUTHENTICATED.
  bool Authorized(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                  const std::string& rpc);
  // OK, or UNAUTHENTICATED naming the RPC (for streaming calls).
  absl::Status CheckToken(grpc::CallbackServerContext* context, const std::string& rpc) const;
  // False after finishing the call with UNAUTHENTICATED or PERMISSION_DENIED when the
  // caller's cluster credential is not one of `roles`.
  bool CallerIs(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                RoleSet roles, const char* rpc) const;
  // CallerIs the worker role, and (with a cluster secret) the worker `worker_id` itself.
  bool CallerIsWorker(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                      const std::string& worker_id, const char* rpc) const;

  CoordinatorHandler* handler_;
  const std::optional<std::string> control_token_;
  ModelStore* models_;
  const std::shared_ptr<const ClusterAuth> auth_;
  const std::shared_ptr<const CredentialIssuer> issuer_;
  StreamDeadlines uploads_;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_GRPC_SERVICE_H_
