// A parameter server shard: aggregation, optimizer, parameter streaming, checkpoints.
// Start-up: restore the newest intact checkpoint, serve (health SERVING only then),
// register with the coordinator when one is named, drain on SIGTERM.
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/channel.h"
#include "common/data_plane_wire.h"
#include "common/process.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "common/handoff_slice_flag.h"
#include "common/tls.h"
#include "common/usable_cores.h"
#include "services/parameter_server/coordinator_registration.h"
#include "services/parameter_server/data_plane.h"
#include "services/parameter_server/malloc_tuning.h"
#include "services/parameter_server/parameter_server_service.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50061",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50061.");
ABSL_FLAG(int, http_port, 8081,
          "HTTP port for /metrics and /healthz (0 picks a free one, -1 disables). "
          "Default: 8081.");
ABSL_FLAG(int, data_port, 0,
          "TCP port of the data plane: PushPull's messages on plain TCP connections, "
          "admitted by OpenDataPlane tickets (docs/parameter_server.md), on the --listen "
          "host. 0 picks a free port (workers learn it from OpenDataPlane); -1 runs none "
          "(workers then use gRPC PushPull). A shard serving TLS runs none: its bytes stay "
          "encrypted on gRPC. Default: 0.");
ABSL_FLAG(bool, data_local_socket, true,
          "Also serve the data plane on a Unix socket at a random name in Linux's abstract "
          "namespace, announced by OpenDataPlane: workers in this shard's network namespace "
          "(the same host, or the same pod) use it instead of loopback TCP, admitted by the "
          "same tickets after the shard proves it issued theirs. Off: TCP only. "
          "Default: true.");
ABSL_FLAG(int64_t, max_partition_bytes, 4 << 20,
          "Largest partition (bytes, FLOAT32) this shard accepts; sets the gRPC receive "
          "limit. Default: 4194304 (4 MiB).");

// --- Cluster ---
ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address host:port to register with (retried with backoff until it "
          "answers). Empty: serve standalone. Default: empty.");
ABSL_FLAG(int, shard_index, -1,
          "Shard index this process serves, e.g. a StatefulSet ordinal; -1 lets the "
          "coordinator pick (standalone: the first InitPartitions names it). Default: -1.");

// --- Checkpoints ---
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Directory of this shard's checkpoints (files under <dir>/shard-<k>/), used when "
          "the job names none; the newest intact checkpoint in it is restored at start. "
          "Empty: no checkpoints unless the job names a directory. Default: empty.");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Directory a job's own checkpoint_dir must lie in (relative ones are taken from "
          "it; '..' and symbolic links out of it are refused). Default: empty (the "
          "--checkpoint_dir; with neither, jobs may not name a checkpoint_dir).");
ABSL_FLAG(double, min_checkpoint_interval_seconds, 5,
          "Checkpoint RPC: at most one new on-demand checkpoint per this many seconds "
          "(sooner: RESOURCE_EXHAUSTED; at the step of the last one: that one again). "
          "Default: 5.");
ABSL_FLAG(double, init_timeout_seconds, 300,
          "An InitPartitions stream still open after this many seconds is cancelled and the "
          "initial values it sent are freed (a caller that stopped sending but keeps its "
          "connection). Default: 300.");
ABSL_FLAG(int, checkpoints_to_keep, 5,
          "Checkpoint files kept per shard directory (>= 1); older ones are deleted. "
          "Default: 5 (see docs/parameter_server.md: fewer can leave a restarted shard's "
          "step unreachable on the others).");

// --- Performance ---
ABSL_FLAG(int, malloc_arena_max, 1,
          "glibc malloc arenas (1: all threads share one heap, so multi-MiB message buffers "
          "are reused instead of page-faulted; set through GLIBC_TUNABLES, re-executing the "
          "process once at start; 0: glibc's default). Default: 1.");
ABSL_FLAG(int, summation_threads, 0,
          "Threads that sum pushes and apply the optimizer; each partition always runs on "
          "the same thread. 0: one per CPU core. Default: 0.");

namespace {

// The flags' bounds: the first one broken, naming the flag and the value.
absl::Status CheckFlags() {
  const int64_t max_partition_bytes = absl::GetFlag(FLAGS_max_partition_bytes);
  if (max_partition_bytes < 4 || max_partition_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_partition_bytes must be a positive multiple of 4, got ", max_partition_bytes));
  }
  if (absl::GetFlag(FLAGS_checkpoints_to_keep) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoints_to_keep must be >= 1, got ",
                                                   absl::GetFlag(FLAGS_checkpoints_to_keep)));
  }
  const double min_interval = absl::GetFlag(FLAGS_min_checkpoint_interval_seconds);
  if (!(min_interval >= 0) || min_interval > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_checkpoint_interval_seconds must be in [0, 86400], got ", min_interval));
  }
  const double init_timeout = absl::GetFlag(FLAGS_init_timeout_seconds);
  if (!(init_timeout >= 1) || init_timeout > 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat("--init_timeout_seconds must be in [1, 86400], got ", init_timeout));
  }
  if (absl::GetFlag(FLAGS_shard_index) < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_index must be >= -1, got ", absl::GetFlag(FLAGS_shard_index)));
  }
  if (absl::GetFlag(FLAGS_summation_threads) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--summation_threads must be >= 0, got ",
                                                   absl::GetFlag(FLAGS_summation_threads)));
  }
  const int data_port = absl::GetFlag(FLAGS_data_port);
  if (data_port < -1 || data_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_port must be -1 (none), 0 (a free port) or a port, got ", data_port));
  }
  return absl::OkStatus();
}

// The TCP data plane on the gRPC listen address's host, unless there is none to run
// (--data_port=-1, TLS, a Unix socket): null then. INVALID_ARGUMENT for a --listen
// without a host; UNAVAILABLE when the port cannot be bound.
absl::StatusOr<std::unique_ptr<tributary::ps::DataPlaneServer>> StartDataPlane(
    tributary::ps::ParameterShard& shard, tributary::ps::PartitionExecutor& executor,
    std::shared_ptr<prometheus::Registry> registry) {
  const int data_port = absl::GetFlag(FLAGS_data_port);
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (data_port < 0) return nullptr;
  if (tributary::TlsFilesFromFlags().enabled()) {
    LOG(INFO) << "TLS: no TCP data plane (--data_port ignored); PushPull stays on gRPC";
    return nullptr;
  }
  if (absl::StartsWith(listen, "unix:")) {
    LOG(INFO) << "--listen=" << listen << " is a Unix socket: no TCP data plane; PushPull "
              << "stays on gRPC";
    return nullptr;
  }
  tributary::ps::DataPlaneOptions options;
  // ":PORT" listens on every address, as gRPC does.
  absl::StatusOr<std::string> listen_host =
      absl::StartsWith(listen, ":") ? absl::StatusOr<std::string>("0.0.0.0")
                                    : tributary::data_plane::HostOf(listen);
  if (!listen_host.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen=", listen, ": ", listen_host.status().message()));
  }
  options.bind_host = *listen_host;
  options.port = data_port;
  options.max_partition_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_partition_bytes));
  options.registry = registry;
  options.local_socket = absl::GetFlag(FLAGS_data_local_socket);
  auto data_plane = std::make_unique<tributary::ps::DataPlaneServer>(&shard, &executor, options);
  if (absl::Status started = data_plane->Start(); !started.ok()) {
    return absl::UnavailableError(absl::StrCat("--data_port=", data_port, ": ", started.message()));
  }
  LOG(INFO) << "data plane on " << options.bind_host << ":" << data_plane->port()
            << (data_plane->local_socket().empty()
                    ? std::string()
                    : absl::StrCat(" and on the local socket @", data_plane->local_socket()));
  return data_plane;
}

// Registration with --coordinator (none without it): the shard learns its index from
// the answer.
std::unique_ptr<tributary::ps::CoordinatorRegistration> Register(
    tributary::ps::ParameterShard& shard, const tributary::ServiceHost& host) {
  if (absl::GetFlag(FLAGS_coordinator).empty()) return nullptr;
  tributary::ps::RegistrationOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.channel = tributary::ChannelOptionsFromFlags(tributary::Role::kParameterServer);
  options.request.set_address(host.advertised_address());
  options.request.set_http_port(static_cast<uint32_t>(std::max(0, host.http_port())));
  options.request.set_shard_index(shard.shard_index());
  options.request.set_version(tributary::kVersion);
  return std::make_unique<tributary::ps::CoordinatorRegistration>(
      std::move(options),
      [&shard](const tributary::v1::RegisterParameterServerResponse& response) {
        if (absl::Status set = shard.set_shard_index(response.shard_index()); !set.ok()) {
          LOG(ERROR) << "the coordinator assigned shard " << response.shard_index() << ": "
                     << set;
        }
      });
}

}  // namespace

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "parameter_server: one Tributary PS shard.\n"
                         "Usage: parameter_server [--listen=HOST:PORT] [--http_port=N] "
                         "[--coordinator=HOST:PORT] [--shard_index=K] [--checkpoint_dir=DIR] ...");
  // First, while this is the only thread: it may re-execute the process.
  if (!tributary::ps::TuneMallocForLargeMessages(argv, absl::GetFlag(FLAGS_malloc_arena_max))) {
    LOG(WARNING) << "could not tune malloc for large messages";
  }
  tributary::ShutdownSignal shutdown;
  if (absl::Status valid = CheckFlags(); !valid.ok()) {
    LOG(ERROR) << valid.message();
    return 2;
  }
  if (absl::Status slice = tributary::ApplyHandoffSliceFlag(); !slice.ok()) {
    LOG(ERROR) << slice.message();
    return 2;
  }
  const int64_t max_partition_bytes = absl::GetFlag(FLAGS_max_partition_bytes);
  int threads = absl::GetFlag(FLAGS_summation_threads);
  if (threads == 0) threads = tributary::UsableCores();
  absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
      tributary::ServerClusterAuthFromFlags("parameter_server");
  if (!auth.ok()) {
    LOG(ERROR) << auth.status().message();
    return 2;
  }

  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "parameter_server", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port),
      tributary::MaxReceiveBytesForPartition(max_partition_bytes)));

  tributary::ps::ShardOptions options;
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.checkpoints_to_keep = absl::GetFlag(FLAGS_checkpoints_to_keep);
  options.min_checkpoint_interval =
      absl::Seconds(absl::GetFlag(FLAGS_min_checkpoint_interval_seconds));
  options.max_partition_bytes = max_partition_bytes;
  tributary::ps::ParameterShard shard(options, host.registry());
  // Ready means restored: health stays NOT_SERVING until this is done.
  absl::StatusOr<std::string> restored = shard.RestoreFromCheckpointDirectory();
  if (!restored.ok()) {
    LOG(ERROR) << "cannot restore from " << options.checkpoint_dir << ": " << restored.status();
    return 1;
  }
  LOG(INFO) << (restored->empty() ? std::string("starting with no job")
                                  : "restored from " + *restored);

  tributary::ps::PartitionExecutor executor(threads);
  tributary::ps::ParameterServerService service(
      &shard, &executor, *auth, absl::Seconds(absl::GetFlag(FLAGS_init_timeout_seconds)));
  absl::StatusOr<std::unique_ptr<tributary::ps::DataPlaneServer>> data_plane =
      StartDataPlane(shard, executor, host.registry());
  if (!data_plane.ok()) {
    LOG(ERROR) << data_plane.status().message();
    return absl::IsInvalidArgument(data_plane.status()) ? 2 : 1;
  }
  if (*data_plane != nullptr) service.set_data_plane(data_plane->get());
  host.AddService(&service, tributary::v1::ParameterServer::service_full_name());
  if (absl::Status started = host.Start(); !started.ok()) {
    LOG(ERROR) << "cannot start: " << started;
    return 1;
  }
  host.SetServing(true);
  LOG(INFO) << "shard ready: " << threads << " summation threads, max partition "
            << max_partition_bytes << " bytes";
  std::unique_ptr<tributary::ps::CoordinatorRegistration> registration = Register(shard, host);

  while (!shutdown.WaitFor(absl::Seconds(1))) {
    shard.RefreshGauges();
    service.ExpireStalledInits();
  }
  LOG(INFO) << "shutting down";
  registration.reset();
  if (*data_plane != nullptr) (*data_plane)->Shutdown();
  host.Shutdown();
  shard.FlushCheckpoints();
  return 0;
}
