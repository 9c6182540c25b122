// A parameter server shard: aggregation, optimizer, parameter streaming, checkpoints.
#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "absl/flags/flag.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "proto/parameter_server.grpc.pb.h"

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50061",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50061.");
ABSL_FLAG(int, http_port, 8081,
          "HTTP port for /metrics and /healthz (0 picks a free one, -1 disables). "
          "Default: 8081.");
ABSL_FLAG(int64_t, max_partition_bytes, 4 << 20,
          "Largest partition (bytes, FLOAT32) this shard accepts; sets the gRPC receive "
          "limit. Default: 4194304 (4 MiB).");

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "parameter_server: one Tributary PS shard.\n"
                         "Usage: parameter_server [--listen=HOST:PORT] [--http_port=N] ...");
  tributary::ShutdownSignal shutdown;
  // The RPCs themselves arrive with the parameter server issue; until then gRPC
  // answers UNIMPLEMENTED for each of them.
  tributary::v1::ParameterServer::CallbackService service;
  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "parameter_server", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port),
      tributary::MaxReceiveBytesForPartition(absl::GetFlag(FLAGS_max_partition_bytes))));
  host.AddService(&service, tributary::v1::ParameterServer::service_full_name());
  return tributary::ServeUntilShutdown(host, shutdown);
}
