// The Worker gRPC service: a thin adaptor from tributary.v1.Worker to WorkerHandler.
#ifndef TRIBUTARY_WORKER_WORKER_SERVICE_H_
#define TRIBUTARY_WORKER_WORKER_SERVICE_H_

#include <memory>

#include "common/cluster_auth.h"
#include "proto/worker.grpc.pb.h"
#include "worker/worker_runtime.h"

namespace tributary::worker {

class WorkerService : public v1::Worker::CallbackService {
 public:
  // Of a DrainRequest's reason, what reaches the handler (the rest is counted).
  static constexpr size_t kMaxDrainReasonBytes = 1024;

  // With an `auth` (--cluster_token_file), GetStatus needs any cluster role and Drain
  // the coordinator's or the operator's.
  explicit WorkerService(WorkerHandler& handler,
                         std::shared_ptr<const ClusterAuth> auth = nullptr)
      : handler_(handler), auth_(std::move(auth)) {}

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetWorkerStatusRequest* request,
                                      v1::WorkerStatus* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;

 private:
  WorkerHandler& handler_;
  const std::shared_ptr<const ClusterAuth> auth_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_SERVICE_H_
