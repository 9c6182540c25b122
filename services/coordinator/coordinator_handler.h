// The coordinator's RPCs as transport-free handlers (Ray's grpc_service_interfaces.h
// pattern): the gRPC adaptor (grpc_service.h) turns each call into one Handle* call
// and the reply callback into Finish(). Unit tests call the handlers directly.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_HANDLER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_HANDLER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace tributary::coordinator {

// Runs exactly once per call, after the reply message is filled in; possibly on
// another thread and later (RegisterWorker, WaitRendezvous).
using ReplyCallback = std::function<void(absl::Status)>;

class CoordinatorHandler {
 public:
  virtual ~CoordinatorHandler() = default;

  virtual void HandleRegisterWorker(const v1::RegisterWorkerRequest& request,
                                    v1::RegisterWorkerResponse* reply, ReplyCallback done) = 0;
  virtual void HandleHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply,
                               ReplyCallback done) = 0;
  virtual void HandleDeregister(const v1::DeregisterRequest& request, v1::DeregisterResponse* reply,
                                ReplyCallback done) = 0;
  virtual void HandleRegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                             v1::RegisterParameterServerResponse* reply,
                                             ReplyCallback done) = 0;
  virtual void HandlePublishRendezvous(const v1::PublishRendezvousRequest& request,
                                       v1::PublishRendezvousResponse* reply,
                                       ReplyCallback done) = 0;
  // Returns an id for CancelWaitRendezvous while the wait is pending, 0 once answered.
  virtual uint64_t HandleWaitRendezvous(const v1::WaitRendezvousRequest& request,
                                        v1::WaitRendezvousResponse* reply, ReplyCallback done) = 0;
  // The caller went away: true when `done` of that wait will never run.
  virtual bool CancelWaitRendezvous(uint64_t wait_id) = 0;
  virtual void HandleSubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply,
                               ReplyCallback done) = 0;
  virtual void HandleGetJob(const v1::GetJobRequest& request, v1::Job* reply,
                            ReplyCallback done) = 0;
  virtual void HandleGetJobHistory(const v1::GetJobHistoryRequest& request,
                                   v1::JobHistory* reply, ReplyCallback done) = 0;
  virtual void HandleListJobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* reply,
                              ReplyCallback done) = 0;
  virtual void HandlePauseJob(const v1::JobControlRequest& request, v1::Job* reply,
                              ReplyCallback done) = 0;
  virtual void HandleResumeJob(const v1::JobControlRequest& request, v1::Job* reply,
                               ReplyCallback done) = 0;
  virtual void HandleStopJob(const v1::JobControlRequest& request, v1::Job* reply,
                             ReplyCallback done) = 0;
  virtual void HandleListWorkers(const v1::ListWorkersRequest& request,
                                 v1::ListWorkersResponse* reply, ReplyCallback done) = 0;
  virtual void HandleGetClusterStatus(const v1::GetClusterStatusRequest& request,
                                      v1::ClusterStatus* reply, ReplyCallback done) = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_HANDLER_H_
