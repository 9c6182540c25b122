// The shard's TCP data plane: PushPull's messages on plain TCP connections
// (common/data_plane_wire.h), beside the gRPC PushPull stream, which keeps working
// for every client. gRPC's HTTP/2 transport moves a shard's bulk bytes at about half
// of what a loopback socket does on a small machine (frames, flow control, hand-offs
// between its threads); here each connection has one thread reading pushes straight
// into a reused buffer and one writing values straight from the shard's buffer.
//
// Admission: a connection must present, within the hello timeout, a ticket the
// OpenDataPlane RPC issued (32 random bytes, single use, 30 s): every check of a
// caller (roles, node credentials) stays with gRPC. The ticket binds the connection
// to its (job, generation, node); a push claiming another ends it. Messages are
// validated by the shard exactly as on the gRPC stream, and each frame's length is
// checked against the partition limit before anything is read. Bytes travel
// unencrypted: a shard serving TLS runs no data plane (parameter_server_main).
//
// The same protocol is also served on a Unix socket in the abstract namespace (the
// local lane, common/data_plane_wire.h), for workers in the shard's network
// namespace: on a loaded 2-core host a 470 KB round trip takes about a fifth of what
// it takes through loopback TCP. Admission there adds one step before the hello: the
// shard proves it issued the client's ticket. A local client may then hand over a
// shared memory region (common/shared_region.h): its pushes' data is summed where it
// lies there, and its updates are written there, the socket carrying only the heads.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_DATA_PLANE_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_DATA_PLANE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"

namespace tributary::ps {

struct DataPlaneOptions {
  std::string bind_host = "0.0.0.0";
  int port = 0;                         // 0: a free port (see DataPlaneServer::port()).
  uint64_t max_partition_bytes = 4 << 20;  // Frames above this plus overhead are refused.
  // Open connections (at most a quarter of RLIMIT_NOFILE); more are closed at once.
  int max_connections = 1024;
  // Connections still owing their hello; a newer one evicts the oldest of them.
  int max_unadmitted = 64;
  // Also listen on a Unix socket at a random abstract name (announced by Issue).
  bool local_socket = true;
  // Largest shared region a local-lane connection may hand over (common/shared_region.h;
  // a client asks for twice its partitions' bytes on this shard). Larger: refused, and
  // the connection goes on without one.
  uint64_t max_shared_region_bytes = uint64_t{4} << 30;
  size_t max_tickets = 4096;            // Outstanding tickets.
  absl::Duration ticket_lifetime = absl::Seconds(30);
  absl::Duration hello_timeout = absl::Seconds(10);
  // Where its metrics go (the shard's /metrics); null: kept to itself.
  std::shared_ptr<prometheus::Registry> registry;
};

class DataPlaneServer {
 public:
  // shard and executor are not owned and must outlive the server.
  DataPlaneServer(ParameterShard* shard, PartitionExecutor* executor, DataPlaneOptions options);
  ~DataPlaneServer();
  DataPlaneServer(const DataPlaneServer&) = delete;
  DataPlaneServer& operator=(const DataPlaneServer&) = delete;

  // Binds and starts accepting. UNAVAILABLE naming the address when it cannot bind.
  absl::Status Start();
  // Ends every connection (UNAVAILABLE: the shard is shutting down) and stops
  // accepting; idempotent.
  void Shutdown();

  int port() const { return port_; }
  // The local socket's abstract name without its leading NUL; empty when none.
  const std::string& local_socket() const { return local_name_; }
  uint64_t max_frame_bytes() const;

  // A ticket for one connection speaking for (job, generation, node).
  // RESOURCE_EXHAUSTED when max_tickets are outstanding.
  absl::StatusOr<v1::OpenDataPlaneResponse> Issue(const std::string& job_id, uint64_t generation,
                                                  uint32_t node_rank);

  // Connections open now, and ever refused (bad hello or ticket, over the limit).
  size_t connections() const;
  uint64_t refused() const { return refused_; }

  class Session;

 private:
  struct Binding {
    std::string ticket;
    std::string job_id;
    uint64_t generation = 0;
    uint32_t node_rank = 0;
    absl::Time expires;
  };

  void AcceptLoop();
  // Takes one connection from `listener` (the TCP one or the local one).
  void Accept(int listener, bool local);
  // Counts a connection refused (admission or a limit).
  void Refused(bool local);
  // Joins and frees sessions whose threads are done (all of them with `all`).
  void Sweep(bool all);
  // The binding of `ticket`, removing it; UNAUTHENTICATED when unknown or expired.
  absl::StatusOr<Binding> Redeem(const std::string& ticket);
  // The local lane's proof for the ticket whose SHA-256 is `digest` (kept for the
  // hello); UNAUTHENTICATED when no such ticket is outstanding.
  absl::StatusOr<std::string> ProveLocal(const std::string& digest, const std::string& challenge);
  // The outstanding ticket with this digest; null when there is none (an expired one
  // is dropped here).
  Binding* OutstandingLocked(const std::string& digest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ParameterShard* const shard_;
  PartitionExecutor* const executor_;
  const DataPlaneOptions options_;
  int listener_ = -1;
  int port_ = 0;
  int local_listener_ = -1;
  std::string local_name_;
  std::string namespace_id_;  // dp::LocalNamespaceId(), which its proofs cover.
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  int max_connections_ = 0;

  // tributary_ps_data_plane_*: open connections, outstanding tickets, connections by
  // how they were taken.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* connections_gauge_ = nullptr;
  prometheus::Gauge* tickets_gauge_ = nullptr;
  // By lane: [0] TCP, [1] local.
  prometheus::Counter* admitted_[2] = {nullptr, nullptr};
  prometheus::Counter* refused_counter_[2] = {nullptr, nullptr};
  prometheus::Counter* shared_regions_ = nullptr;

  mutable absl::Mutex mu_;
  // By the ticket's SHA-256 (TicketDigest): the local lane names a ticket so.
  absl::flat_hash_map<std::string, Binding> tickets_ ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_DATA_PLANE_H_
