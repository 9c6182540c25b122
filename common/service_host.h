// Server bootstrap shared by the coordinator, the PS shards and the workers:
// builder -> listening port (TLS or plaintext) -> services -> reflection + health
// -> BuildAndStart, plus the HTTP side port, RPC metrics, a port file and a
// graceful drain. A binary's main() is: make options, add services, Start(),
// wait for shutdown, Shutdown().
#ifndef TRIBUTARY_COMMON_SERVICE_HOST_H_
#define TRIBUTARY_COMMON_SERVICE_HOST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/server.h>
#include <grpcpp/impl/codegen/service_type.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "common/tls.h"

namespace tributary {

struct ServerOptions {
  std::string name;                  // "coordinator", "parameter_server", "worker"
  std::string listen_address;        // gRPC "host:port"; port 0 picks a free port.
  std::string http_host = "0.0.0.0";  // FromFlags: the host of listen_address.
  int http_port = 0;                 // 0 picks a free port; -1 = no HTTP side port.
  int64_t max_receive_bytes = 4 << 20;
  TlsFiles tls;
  absl::Duration drain_grace = absl::Seconds(2);
  std::string port_file;             // Written as JSON once serving; empty = none.
  std::string advertise_host;        // Empty = derived from listen_address.

  // Fills tls, drain_grace, port_file and advertise_host from the shared flags.
  static ServerOptions FromFlags(std::string name, std::string listen_address,
                                 int http_port, int64_t max_receive_bytes);
};

// Receive limit for servers that carry partitions: one partition in the widest
// dtype, plus room for the message's other fields.
int64_t MaxReceiveBytesForPartition(int64_t partition_bytes);

class ServiceHost {
 public:
  explicit ServiceHost(ServerOptions options);
  ~ServiceHost();

  ServiceHost(const ServiceHost&) = delete;
  ServiceHost& operator=(const ServiceHost&) = delete;

  // The process's metrics registry, rendered at /metrics.
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  // For extra routes (the dashboard); add them before Start().
  HttpServer* http() { return http_.get(); }

  // Registers a service (not owned) under its full name, e.g. "tributary.v1.Coordinator",
  // which is also its name in the health service. Call before Start().
  void AddService(grpc::Service* service, const std::string& full_name);

  // Binds, starts serving with every service NOT_SERVING, starts the HTTP port and writes
  // the port file. UNAVAILABLE naming the address when a port cannot be bound.
  absl::Status Start();

  // Health of every added service and of the whole server ("").
  void SetServing(bool serving);
  bool serving() const { return serving_; }

  // NOT_SERVING for good, waits the drain grace, then stops gRPC (in-flight calls get
  // `deadline` to finish) and the HTTP port. Idempotent.
  void Shutdown(absl::Duration deadline = absl::Seconds(5));

  int grpc_port() const { return grpc_port_; }
  int http_port() const;
  // host:port other processes should dial.
  std::string advertised_address() const;
  const std::string& advertised_host() const { return advertised_host_; }
  grpc::Server* server() { return server_.get(); }

 private:
  absl::Status WritePortFile() const;

  ServerOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpServer> http_;
  std::vector<std::pair<grpc::Service*, std::string>> services_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  std::string advertised_host_;
  std::atomic<bool> serving_{false};
  std::atomic<bool> shut_down_{false};
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SERVICE_HOST_H_
