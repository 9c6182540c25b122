// A worker process: local replicas, intra-node reduction, push/pull to the PS.
#include <string>

#include <glog/logging.h>

#include "absl/flags/flag.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "proto/worker.grpc.pb.h"

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50071",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50071.");
ABSL_FLAG(int, http_port, 8082,
          "HTTP port for /metrics and /healthz (0 picks a free one, -1 disables). "
          "Default: 8082.");

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "worker: a Tributary training worker.\n"
                         "Usage: worker [--listen=HOST:PORT] [--http_port=N] ...");
  tributary::ShutdownSignal shutdown;
  // The RPCs themselves arrive with the worker issue; until then gRPC answers
  // UNIMPLEMENTED for each of them.
  tributary::v1::Worker::CallbackService service;
  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "worker", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port), 64 << 20));
  host.AddService(&service, tributary::v1::Worker::service_full_name());
  return tributary::ServeUntilShutdown(host, shutdown);
}
