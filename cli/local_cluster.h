// A whole Tributary cluster on loopback, as child processes: one coordinator, P
// parameter server shards and W workers, each on free ports, with logs, port files,
// state and checkpoints under one run directory. `tributary local` drives it, and
// so do the multi-process tests.
#ifndef TRIBUTARY_CLI_LOCAL_CLUSTER_H_
#define TRIBUTARY_CLI_LOCAL_CLUSTER_H_

#include <grpcpp/channel.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "common/child_process.h"
#include "common/cluster_auth.h"

namespace tributary::cli {

struct LocalClusterOptions {
  // The three binaries.
  std::string coordinator_binary;
  std::string parameter_server_binary;
  std::string worker_binary;

  int ps_shards = 2;
  int workers = 2;
  // Node groups the workers are spread over (round-robin): workers of one node reduce
  // together (Gloo) and one of them pushes. 0 = one node per worker.
  int nodes = 0;
  std::string devices = "cpu";  // --devices of every worker.
  std::string run_dir;          // Logs, port files, state; created if missing.

  // Passed through to every process of that kind, e.g. {"--heartbeat_timeout_ms=2000"}.
  std::vector<std::string> coordinator_args;
  std::vector<std::string> parameter_server_args;
  std::vector<std::string> worker_args;

  absl::Duration start_timeout = absl::Seconds(60);
  // Polled while Start waits for each process: true stops the start (CANCELLED), e.g.
  // Ctrl-C. Unset: never.
  std::function<bool()> start_cancelled;
  absl::Duration stop_grace = absl::Seconds(10);
};

// Finds the three binaries: in bin_dir when given (the layout of an installed
// release: coordinator, parameter_server, worker side by side), else through the
// Bazel runfiles of `argv0` (bazel run //:tributary), or of the running test when
// argv0 is empty (bazel test).
absl::Status LocateBinaries(const std::string& argv0, const std::string& bin_dir,
                            LocalClusterOptions& options);

// Takes the lock of a run directory (created if missing) for this process and the
// cluster it starts: `<run_dir>/tributary-local.lock`, an flock the children inherit,
// so it is held until the last process of the run has exited. Waits up to `wait` for
// a previous run's processes that are still exiting; then FAILED_PRECONDITION naming
// the directory and the process that holds it. Returns the lock's descriptor (keep it
// open for as long as the run lasts).
absl::StatusOr<int> LockRunDirectory(const std::string& run_dir, absl::Duration wait);

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);
  ~LocalCluster();  // Stop().

  // Starts the coordinator, then the shards, then the workers, each once the one
  // before is SERVING (health check on its port file's port). An error names the
  // process and shows its last log lines; CANCELLED when start_cancelled said so (what
  // started is stopped by Stop(), as after any error).
  absl::Status Start();

  // Workers first (they finish their step and deregister), then shards, then the
  // coordinator; SIGKILL after the grace period. Idempotent.
  void Stop();

  // OK while every process that should run does; otherwise names the first one that
  // died, how, and its last log lines. Workers that exited 0 after their job are fine.
  absl::Status CheckProcesses();

  // A worker that is still running, for failure tests: SIGKILL. CheckProcesses does
  // not count it as a failure.
  void KillWorker(int index);

  // For chaos tests: SIGKILL the process (`gracefully`: SIGTERM, and wait for it to
  // leave as it does on its own, a worker deregistering), then start it again with the
  // same flags on the same gRPC and HTTP ports (its peers find it where it was), and
  // wait until it serves. `which`: "coordinator", "ps-K" or "worker-K".
  absl::Status KillAndRestart(const std::string& which, bool gracefully = false);

  std::string coordinator_address() const { return coordinator_address_; }
  std::string dashboard_url() const;
  int dashboard_port() const { return coordinator_http_port_; }
  std::vector<std::string> shard_addresses() const { return shard_addresses_; }
  std::vector<std::string> worker_addresses() const { return worker_addresses_; }
  // A channel to the coordinator with the operator's cluster credential and this run's
  // control token.
  std::shared_ptr<grpc::Channel> coordinator_channel() const { return coordinator_channel_; }
  // Channel options carrying the operator's cluster credential, for calls to the
  // shards and workers (Pull, GetShardStatus, Drain).
  ChannelOptions channel_options() const;
  // The cluster secret every process was given (run_dir/cluster.token, mode 0600).
  std::string cluster_token_file() const;
  // The coordinator's control token, new for every run (run_dir/control.token, mode
  // 0600): SubmitJob, UploadModel and the job control calls need it.
  std::string control_token_file() const;
  const LocalClusterOptions& options() const { return options_; }
  // Every child, coordinator first, then shards, then workers.
  std::vector<ChildProcess*> processes();

 private:
  struct Endpoint {
    int grpc_port = 0;
    int http_port = 0;
  };
  absl::StatusOr<Endpoint> StartAndWait(const std::string& name, std::vector<std::string> argv,
                                        std::unique_ptr<ChildProcess>& slot,
                                        const Endpoint* same_ports = nullptr);
  std::string PortFile(const std::string& name) const;

  LocalClusterOptions options_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> shards_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::vector<bool> killed_;  // Per worker: killed on purpose.
  std::string coordinator_address_;
  int coordinator_http_port_ = 0;
  std::vector<std::string> shard_addresses_;
  std::vector<std::string> worker_addresses_;
  std::shared_ptr<grpc::Channel> coordinator_channel_;
  std::shared_ptr<const ClusterAuth> auth_;
  std::string control_token_;
  // Each process's flags (before the port flags) and ports, by name, for restarts.
  std::map<std::string, std::vector<std::string>> argv_;
  std::map<std::string, Endpoint> endpoints_;
  bool stopped_ = false;
};

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_LOCAL_CLUSTER_H_
