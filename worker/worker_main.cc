// A worker process: local replicas, intra-node reduction, push/pull to the PS.
#include <glog/logging.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "common/channel.h"
#include "common/malloc_thresholds.h"
#include "common/process.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "common/thread_name.h"
#include "common/handoff_slice_flag.h"
#include "worker/devices.h"
#include "worker/worker_runtime.h"
#include "worker/worker_service.h"

// --- Cluster ---
ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051",
          "Coordinator address host:port. Default: 127.0.0.1:50051.");
ABSL_FLAG(std::string, node, "",
          "Node name: workers with the same name form one node group (one leader pushes "
          "for all of them). Default: empty = this machine's host name.");
ABSL_FLAG(std::string, devices, "auto",
          "Devices to offer: auto (GPUs when present, else CPU), cpu, gpu (all GPUs) or "
          "gpu:0,1 (these CUDA ordinals). Default: auto.");
ABSL_FLAG(bool, exit_after_job, false,
          "Exit once the job this worker trained ends (tributary local sets it); otherwise "
          "stay registered for the next job. Default: false.");

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50071",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50071.");
ABSL_FLAG(int, http_port, 8082,
          "HTTP port for /metrics and /healthz (0 picks a free one, -1 disables). "
          "Default: 8082.");
ABSL_FLAG(std::string, gloo_bind_host, "127.0.0.1",
          "Address Gloo's TCP transport binds for the node's other worker processes. "
          "Default: 127.0.0.1 (they share the machine).");

// --- Timeouts ---
ABSL_FLAG(double, collective_timeout_seconds, 30,
          "Seconds an intra-node collective (Gloo/NCCL) may wait for a peer before the step "
          "fails. Default: 30.");
ABSL_FLAG(double, update_timeout_seconds, 120,
          "Seconds a step may wait for one partition's update from the PS. Default: 120.");
ABSL_FLAG(double, register_timeout_seconds, 300,
          "Seconds to keep trying to reach the coordinator at start-up. Default: 300.");
ABSL_FLAG(double, model_fetch_timeout_seconds, 300,
          "Seconds fetching a job's TorchScript file from the coordinator may take. "
          "Default: 300.");

// --- Compute ---
ABSL_FLAG(int, cpu_threads, 0,
          "Threads each CPU matrix product may use; 0 = the cores this process may use (its "
          "CPU affinity and its container's CPU limit) divided by the "
          "replicas of this process (at least 1). Default: 0.");
ABSL_FLAG(bool, overlap_updates, true,
          "Apply each step's PS update partition by partition while the next step's forward "
          "pass runs (it waits only for the layers it reaches); false finishes the update "
          "before the next step starts. Default: true.");
ABSL_FLAG(int, ps_streams_per_shard, 1,
          "PushPull streams (each on its own TCP connection) from this worker, when it leads "
          "its node, to each PS shard; a shard's partitions are dealt among them in turn. "
          "More than 1 helps models with several partitions per shard (bench/ps_throughput "
          "--streams_per_shard); in [1, 16]. Default: 1.");
ABSL_FLAG(std::string, ps_transport, "auto",
          "How PushPull's gradients and updates travel to and from the PS shards: auto (each "
          "shard's data plane when it runs one: its local Unix socket when this worker is in "
          "the shard's network namespace, else its TCP port; else gRPC), local (the local "
          "socket only: a shard out of reach is an error), tcp (the TCP data port only: a "
          "shard without one is an error) or grpc (the gRPC PushPull stream). The data plane "
          "moves the same messages with fewer copies and thread hand-offs "
          "(docs/parameter_server.md); with TLS shards run none. Default: auto.");
ABSL_FLAG(bool, ps_shared_memory, true,
          "On a shard's local socket, move the pushes' and updates' bytes through a memory "
          "region shared with the shard (a sealed memfd this worker makes and hands over), "
          "the socket carrying only the messages' heads: one memcpy each way instead of the "
          "socket's copies and wake-ups. A SYNC node of one process and one replica "
          "(native CPU, or a GPU whose driver page-locks the region; FLOAT32 pushes) keeps "
          "its parameters and gradients in that region itself: no copy at all on the "
          "worker's side. false: the bytes go through the socket. Default: true.");
ABSL_FLAG(std::string, data_root, "/",
          "Every data path a job names (dataset directory, CSV and NPY files; relative ones "
          "from the working directory) must lie in this directory, symbolic links "
          "followed; '..' parts are refused. Default: / (anywhere this user can read).");
ABSL_FLAG(int64_t, eval_batch_size, 1000,
          "Samples per evaluation batch on the test split. Default: 1000.");

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "worker: a Tributary training worker.\n"
                         "Usage: worker --coordinator=HOST:PORT [--node=NAME] "
                         "[--devices=auto|cpu|gpu|gpu:0,1] ...");
  // LibTorch and the engine allocate and free the same large blocks every step.
  if (!tributary::ReuseLargeBlocks()) LOG(WARNING) << "glibc refused the malloc thresholds";
  tributary::ShutdownSignal shutdown;

  absl::StatusOr<tributary::worker::DeviceRequest> devices =
      tributary::worker::ParseDeviceRequest(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) {
    LOG(ERROR) << devices.status();
    return 2;
  }
  absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
      tributary::ServerClusterAuthFromFlags("worker");
  if (!auth.ok()) {
    LOG(ERROR) << auth.status().message();
    return 2;
  }
  tributary::worker::WorkerOptions options;
  options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  if (options.data_root.empty()) {
    LOG(ERROR) << "--data_root must not be empty (/ allows every path)";
    return 2;
  }
  options.node_name = absl::GetFlag(FLAGS_node);
  if (options.node_name.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    options.node_name = name;
  }
  options.devices = *devices;
  options.channel = tributary::ChannelOptionsFromFlags(tributary::Role::kWorker);
  options.bind_host = absl::GetFlag(FLAGS_gloo_bind_host);
  options.collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_seconds));
  options.update_timeout = absl::Seconds(absl::GetFlag(FLAGS_update_timeout_seconds));
  options.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_seconds));
  options.model_fetch_timeout = absl::Seconds(absl::GetFlag(FLAGS_model_fetch_timeout_seconds));
  options.exit_after_job = absl::GetFlag(FLAGS_exit_after_job);
  options.eval_batch_size = absl::GetFlag(FLAGS_eval_batch_size);
  options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  options.overlap_updates = absl::GetFlag(FLAGS_overlap_updates);
  options.ps_streams_per_shard = absl::GetFlag(FLAGS_ps_streams_per_shard);
  if (options.ps_streams_per_shard < 1 || options.ps_streams_per_shard > 16) {
    LOG(ERROR) << "--ps_streams_per_shard=" << options.ps_streams_per_shard
               << " must be in [1, 16]";
    return 2;
  }
  absl::StatusOr<tributary::worker::PsTransport> transport =
      tributary::worker::ParsePsTransport(absl::GetFlag(FLAGS_ps_transport));
  if (!transport.ok()) {
    LOG(ERROR) << transport.status().message();
    return 2;
  }
  options.ps_transport = *transport;
  options.ps_shared_memory = absl::GetFlag(FLAGS_ps_shared_memory);
  if (absl::Status slice = tributary::ApplyHandoffSliceFlag(); !slice.ok()) {
    LOG(ERROR) << slice.message();
    return 2;
  }

  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "worker", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port), 4 << 20));
  tributary::worker::WorkerRuntime runtime(options, *host.registry());
  tributary::worker::WorkerService service(runtime, *auth);
  host.AddService(&service, tributary::v1::Worker::service_full_name());
  if (absl::Status started = host.Start(); !started.ok()) {
    LOG(ERROR) << "cannot start: " << started;
    return 1;
  }
  runtime.SetEndpoint(host.advertised_host(), host.grpc_port(), host.http_port());
  host.SetServing(true);

  absl::Status result;
  std::thread trainer([&] {
    tributary::NameThisThread("train");
    result = runtime.Run(shutdown);
    if (!result.ok()) shutdown.Request("worker error");
  });
  const std::string reason = shutdown.Wait();
  LOG(INFO) << "stopping (" << reason << "); finishing the current step";
  host.SetServing(false);
  trainer.join();
  host.Shutdown();
  if (!result.ok()) {
    LOG(ERROR) << result;
    return 1;
  }
  return 0;
}
