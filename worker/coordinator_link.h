// Everything a worker asks of the coordinator, behind one interface: registration,
// heartbeats, leaving, the job's model file and the node group's rendezvous KV.
// GrpcCoordinatorLink talks to a real coordinator (with the deadlines below);
// worker/testing/fake_coordinator_link.h answers from a test's script, so that
// WorkerRuntime's control logic is unit-tested without a coordinator.
#ifndef TRIBUTARY_WORKER_COORDINATOR_LINK_H_
#define TRIBUTARY_WORKER_COORDINATOR_LINK_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/comm/rendezvous_client.h"

namespace tributary::worker {

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  // One attempt each; the caller retries. Errors keep the coordinator's codes
  // (UNAVAILABLE / DEADLINE_EXCEEDED when it cannot be reached).
  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) = 0;
  virtual absl::Status Deregister(const v1::DeregisterRequest& request) = 0;
  // The job's TorchScript file, checked against its digest (model_fetch.h).
  virtual absl::StatusOr<std::shared_ptr<const std::string>> FetchModel(
      const v1::TorchScriptFile& file, absl::Duration timeout) = 0;
  // The KV through which a node group's processes rendezvous in a generation.
  virtual std::unique_ptr<RendezvousClient> Rendezvous(const std::string& rendezvous_id) = 0;
};

class GrpcCoordinatorLink : public CoordinatorLink {
 public:
  // Deadlines per call: RegisterWorker and Heartbeat 10 s, Deregister 5 s.
  static absl::StatusOr<std::unique_ptr<GrpcCoordinatorLink>> Create(const std::string& address,
                                                                     const ChannelOptions& options);

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override;
  absl::Status Deregister(const v1::DeregisterRequest& request) override;
  absl::StatusOr<std::shared_ptr<const std::string>> FetchModel(const v1::TorchScriptFile& file,
                                                                absl::Duration timeout) override;
  std::unique_ptr<RendezvousClient> Rendezvous(const std::string& rendezvous_id) override;

 private:
  explicit GrpcCoordinatorLink(std::shared_ptr<grpc::Channel> channel);

  void AddWorkerCredential(grpc::ClientContext& context);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  // The last registration's credential, sent with Heartbeat and Deregister.
  absl::Mutex mu_;
  std::string worker_credential_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COORDINATOR_LINK_H_
