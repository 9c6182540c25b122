// The coordinator's rendezvous KV served on its own, over the Coordinator gRPC
// service on 127.0.0.1 (port 0), with its deadline timer: what the workers'
// rendezvous clients and Gloo's store need (worker/comm/gloo_store_test.cc), without
// a whole coordinator. The service's other RPCs answer UNIMPLEMENTED.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_TESTING_RENDEZVOUS_SERVER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_TESTING_RENDEZVOUS_SERVER_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "common/clock.h"
#include "common/service_host.h"
#include "services/coordinator/coordinator_handler.h"
#include "services/coordinator/grpc_service.h"
#include "services/coordinator/rendezvous_store.h"

namespace tributary::coordinator::testing {

class RendezvousServer {
 public:
  RendezvousServer();
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // OK once serving; the reason otherwise.
  const absl::Status& started() const { return started_; }
  int port() const { return host_->grpc_port(); }
  // Open ids here, as forming a generation would; watch waits through stats().
  RendezvousStore& store() { return store_; }

 private:
  class Handler;

  RealClock clock_;
  RendezvousStore store_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CoordinatorGrpcService> service_;
  std::unique_ptr<ServiceHost> host_;
  absl::Status started_;
  std::atomic<bool> stopping_{false};
  std::thread timer_;
};

}  // namespace tributary::coordinator::testing

#endif  // TRIBUTARY_SERVICES_COORDINATOR_TESTING_RENDEZVOUS_SERVER_H_
