// The Worker gRPC service: a thin adaptor from tributary.v1.Worker to WorkerHandler.
#ifndef TRIBUTARY_WORKER_WORKER_SERVICE_H_
#define TRIBUTARY_WORKER_WORKER_SERVICE_H_

#include "proto/worker.grpc.pb.h"
#include "worker/worker_runtime.h"

namespace tributary::worker {

class WorkerService : public v1::Worker::CallbackService {
 public:
  explicit WorkerService(WorkerHandler& handler) : handler_(handler) {}

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetWorkerStatusRequest* request,
                                      v1::WorkerStatus* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;

 private:
  WorkerHandler& handler_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_SERVICE_H_
