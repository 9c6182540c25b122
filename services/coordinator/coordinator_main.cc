// The coordinator binary: membership, assignment, rendezvous, jobs, dashboard.
#include <string>

#include <glog/logging.h>

#include "absl/flags/flag.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "proto/coordinator.grpc.pb.h"

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50051.");
ABSL_FLAG(int, http_port, 8080,
          "HTTP port for the dashboard, /api/v1/status, /metrics and /healthz "
          "(0 picks a free one, -1 disables). Default: 8080.");

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "coordinator: Tributary's membership, rendezvous and job service.\n"
                         "Usage: coordinator [--listen=HOST:PORT] [--http_port=N] ...");
  tributary::ShutdownSignal shutdown;
  // The RPCs themselves arrive with the coordinator issue; until then gRPC answers
  // UNIMPLEMENTED for each of them.
  tributary::v1::Coordinator::CallbackService service;
  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "coordinator", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port), 4 << 20));
  host.AddService(&service, tributary::v1::Coordinator::service_full_name());
  return tributary::ServeUntilShutdown(host, shutdown);
}
