#include "cli/local_cluster.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/secure_random.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace tributary::cli {
namespace {

constexpr int kLogTailLines = 15;

absl::Status MakeDirectories(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      partial = path.substr(0, i);
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat("cannot create directory ", partial));
      }
    }
  }
  return absl::OkStatus();
}

// {"grpc_port":N,"http_port":M,...} as written by ServiceHost.
bool ReadPortFile(const std::string& path, int* grpc_port, int* http_port) {
  std::ifstream in(path);
  if (!in) return false;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch grpc_match, http_match;
  if (!std::regex_search(text, grpc_match, std::regex("\"grpc_port\":(\\d+)")) ||
      !std::regex_search(text, http_match, std::regex("\"http_port\":(-?\\d+)"))) {
    return false;
  }
  *grpc_port = std::stoi(grpc_match[1]);
  *http_port = std::stoi(http_match[1]);
  return true;
}

bool Serving(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

std::string Died(ChildProcess& child) {
  return absl::StrCat(child.name(), " ", child.ExitDescription(), "; last lines of ",
                      child.log_path(), ":\n", child.LogTail(kLogTailLines));
}

}  // namespace

absl::Status LocateBinaries(const std::string& argv0, const std::string& bin_dir,
                            LocalClusterOptions& options) {
  if (!bin_dir.empty()) {
    options.coordinator_binary = bin_dir + "/coordinator";
    options.parameter_server_binary = bin_dir + "/parameter_server";
    options.worker_binary = bin_dir + "/worker";
    return absl::OkStatus();
  }
  std::string error;
  std::unique_ptr<bazel::tools::cpp::runfiles::Runfiles> runfiles(
      argv0.empty() ? bazel::tools::cpp::runfiles::Runfiles::CreateForTest(&error)
                    : bazel::tools::cpp::runfiles::Runfiles::Create(argv0, &error));
  if (runfiles == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot find the service binaries: no Bazel runfiles (", error,
                     "); run through `bazel run //:tributary -- ...` or pass --bin_dir"));
  }
  options.coordinator_binary = runfiles->Rlocation("tributary/services/coordinator/coordinator");
  options.parameter_server_binary =
      runfiles->Rlocation("tributary/services/parameter_server/parameter_server");
  options.worker_binary = runfiles->Rlocation("tributary/worker/worker");
  return absl::OkStatus();
}

absl::StatusOr<int> LockRunDirectory(const std::string& run_dir, absl::Duration wait) {
  // Every refusal names the flag: the directory is the user's choice.
  struct stat info;
  if (absl::Status made = MakeDirectories(run_dir); !made.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--run_dir=", run_dir, ": cannot make it a directory (", made.message(), ")"));
  }
  if (stat(run_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--run_dir=", run_dir, ": cannot make it a directory (a file of that name "
                     "is in the way)"));
  }
  const std::string path = run_dir + "/tributary-local.lock";
  // Not close-on-exec: the cluster's processes hold the lock too, so a run whose
  // launcher died still owns its directory until its last process is gone.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--run_dir=", run_dir, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  const absl::Time give_up = absl::Now() + wait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (error != EWOULDBLOCK) {
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("--run_dir=", run_dir, ": cannot lock ", path, ": ", std::strerror(error)));
    }
    if (absl::Now() >= give_up) {
      char holder[32] = {};
      const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "--run_dir=", run_dir, " is in use by another tributary local run (pid ",
          n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown"),
          ", or the processes it started): wait for it to end, stop it, or choose another "
          "--run_dir"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    LOG(WARNING) << "cannot write the pid into " << path;
  }
  return fd;
}

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

LocalCluster::~LocalCluster() { Stop(); }

std::string LocalCluster::PortFile(const std::string& name) const {
  return absl::StrCat(options_.run_dir, "/", name, ".ports.json");
}

std::string LocalCluster::cluster_token_file() const {
  return absl::StrCat(options_.run_dir, "/cluster.token");
}

std::string LocalCluster::control_token_file() const {
  return absl::StrCat(options_.run_dir, "/control.token");
}

ChannelOptions LocalCluster::channel_options() const {
  return ChannelOptionsFor(auth_.get(), Role::kOperator);
}

namespace {

// A new random secret (32 random bytes, as 64 hex digits) in `path`, mode 0600, made
// for this run alone (an old file of that name is replaced).
absl::StatusOr<std::string> WriteSecretFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = SecureRandomBytes(32);
  if (!bytes.ok()) {
    return absl::InternalError(absl::StrCat("no secret for ", path, ": ", bytes.status().message()));
  }
  const std::string secret = absl::BytesToHexString(*bytes);
  std::remove(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const bool written =
      write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return secret;
}

}  // namespace

std::string LocalCluster::dashboard_url() const {
  return absl::StrCat("http://127.0.0.1:", coordinator_http_port_, "/");
}

std::vector<ChildProcess*> LocalCluster::processes() {
  std::vector<ChildProcess*> all;
  if (coordinator_ != nullptr) all.push_back(coordinator_.get());
  for (auto& shard : shards_) all.push_back(shard.get());
  for (auto& worker : workers_) all.push_back(worker.get());
  return all;
}

absl::StatusOr<LocalCluster::Endpoint> LocalCluster::StartAndWait(
    const std::string& name, std::vector<std::string> argv, std::unique_ptr<ChildProcess>& slot,
    const Endpoint* same_ports) {
  if (options_.start_cancelled && options_.start_cancelled()) {
    return absl::CancelledError(absl::StrCat("interrupted before ", name, " started"));
  }
  argv_[name] = argv;
  const std::string port_file = PortFile(name);
  std::remove(port_file.c_str());
  // Free ports unless the caller chose them (e.g. --coordinator_arg=--http_port=8080):
  // a flag given twice would take the last one, and the user's would be lost.
  auto given = [&](const std::string& flag) {
    return std::any_of(argv.begin(), argv.end(),
                       [&](const std::string& arg) { return absl::StartsWith(arg, flag + "="); });
  };
  if (!given("--listen")) {
    argv.push_back(absl::StrCat("--listen=127.0.0.1:", same_ports ? same_ports->grpc_port : 0));
  }
  if (!given("--http_port")) {
    argv.push_back(absl::StrCat("--http_port=", same_ports ? same_ports->http_port : 0));
  }
  argv.push_back("--port_file=" + port_file);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(name, std::move(argv), absl::StrCat(options_.run_dir, "/", name, ".log"));
  if (!child.ok()) return child.status();
  slot = *std::move(child);

  Endpoint endpoint;
  const absl::Time give_up = absl::Now() + options_.start_timeout;
  std::shared_ptr<grpc::Channel> channel;
  while (true) {
    if (options_.start_cancelled && options_.start_cancelled()) {
      return absl::CancelledError(absl::StrCat("interrupted while ", name, " was starting"));
    }
    if (!slot->Running()) {
      return absl::UnavailableError(absl::StrCat("could not start ", Died(*slot)));
    }
    if (channel == nullptr && ReadPortFile(port_file, &endpoint.grpc_port, &endpoint.http_port)) {
      channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", endpoint.grpc_port),
                                    grpc::InsecureChannelCredentials());
    }
    if (channel != nullptr && Serving(channel)) {
      endpoints_[name] = endpoint;
      return endpoint;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          name, " did not become SERVING within ", absl::FormatDuration(options_.start_timeout),
          "; last lines of ", slot->log_path(), ":\n", slot->LogTail(kLogTailLines)));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status LocalCluster::Start() {
  if (absl::Status made = MakeDirectories(options_.run_dir); !made.ok()) return made;
  absl::StatusOr<std::string> secret = WriteSecretFile(cluster_token_file());
  if (!secret.ok()) return secret.status();
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth = ClusterAuth::FromSecret(*secret);
  if (!auth.ok()) return auth.status();
  auth_ = *std::move(auth);
  // The user's control calls (SubmitJob, UploadModel, Pause/Resume/StopJob) need this
  // run's own token: another local process cannot steer the run.
  absl::StatusOr<std::string> control = WriteSecretFile(control_token_file());
  if (!control.ok()) return control.status();
  control_token_ = *std::move(control);
  const std::string token_flag = "--cluster_token_file=" + cluster_token_file();
  std::vector<std::string> coordinator = {
      options_.coordinator_binary,
      token_flag,
      "--control_token_file=" + control_token_file(),
      absl::StrCat("--ps_shards=", options_.ps_shards),
      absl::StrCat("--state_dir=", options_.run_dir, "/coordinator-state"),
      "--drain_seconds=0.2",
  };
  coordinator.insert(coordinator.end(), options_.coordinator_args.begin(),
                     options_.coordinator_args.end());
  absl::StatusOr<Endpoint> endpoint = StartAndWait("coordinator", coordinator, coordinator_);
  if (!endpoint.ok()) return endpoint.status();
  coordinator_address_ = absl::StrCat("127.0.0.1:", endpoint->grpc_port);
  coordinator_http_port_ = endpoint->http_port;
  ChannelOptions coordinator_options = channel_options();
  coordinator_options.bearer_token = control_token_;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(coordinator_address_, coordinator_options);
  if (!channel.ok()) return channel.status();
  coordinator_channel_ = *std::move(channel);

  for (int i = 0; i < options_.ps_shards; ++i) {
    const std::string name = absl::StrCat("ps-", i);
    std::vector<std::string> argv = {
        options_.parameter_server_binary,
        token_flag,
        "--coordinator=" + coordinator_address_,
        absl::StrCat("--shard_index=", i),
        absl::StrCat("--checkpoint_dir=", options_.run_dir, "/", name, "-checkpoints"),
        "--drain_seconds=0.2",
    };
    argv.insert(argv.end(), options_.parameter_server_args.begin(),
                options_.parameter_server_args.end());
    shards_.emplace_back();
    absl::StatusOr<Endpoint> shard = StartAndWait(name, argv, shards_.back());
    if (!shard.ok()) return shard.status();
    shard_addresses_.push_back(absl::StrCat("127.0.0.1:", shard->grpc_port));
  }

  const int nodes = options_.nodes > 0 ? options_.nodes : options_.workers;
  for (int i = 0; i < options_.workers; ++i) {
    const std::string name = absl::StrCat("worker-", i);
    std::vector<std::string> argv = {
        options_.worker_binary,
        token_flag,
        "--coordinator=" + coordinator_address_,
        absl::StrCat("--node=node-", i % nodes),
        "--devices=" + options_.devices,
        "--exit_after_job",
        "--drain_seconds=0.2",
    };
    argv.insert(argv.end(), options_.worker_args.begin(), options_.worker_args.end());
    workers_.emplace_back();
    killed_.push_back(false);
    absl::StatusOr<Endpoint> worker = StartAndWait(name, argv, workers_.back());
    if (!worker.ok()) return worker.status();
    worker_addresses_.push_back(absl::StrCat("127.0.0.1:", worker->grpc_port));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::CheckProcesses() {
  if (coordinator_ != nullptr && !coordinator_->Running()) {
    return absl::UnavailableError(Died(*coordinator_));
  }
  for (auto& shard : shards_) {
    if (shard != nullptr && !shard->Running()) return absl::UnavailableError(Died(*shard));
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    ChildProcess* worker = workers_[i].get();
    if (worker != nullptr && !killed_[i] && !worker->Running() && worker->exit_code() != 0) {
      return absl::UnavailableError(Died(*worker));
    }
  }
  return absl::OkStatus();
}

void LocalCluster::KillWorker(int index) {
  if (index >= 0 && index < static_cast<int>(workers_.size()) && workers_[index] != nullptr) {
    killed_[index] = true;
    workers_[index]->Signal(SIGKILL);
    workers_[index]->Wait(absl::Seconds(10));
  }
}

absl::Status LocalCluster::KillAndRestart(const std::string& which, bool gracefully) {
  std::unique_ptr<ChildProcess>* slot = nullptr;
  int worker = -1;
  if (which == "coordinator") {
    slot = &coordinator_;
  } else if (absl::StartsWith(which, "ps-")) {
    int index = -1;
    if (absl::SimpleAtoi(which.substr(3), &index) && index >= 0 &&
        index < static_cast<int>(shards_.size())) {
      slot = &shards_[index];
    }
  } else if (absl::StartsWith(which, "worker-")) {
    if (absl::SimpleAtoi(which.substr(7), &worker) && worker >= 0 &&
        worker < static_cast<int>(workers_.size())) {
      slot = &workers_[worker];
    }
  }
  if (slot == nullptr || *slot == nullptr || argv_.count(which) == 0) {
    return absl::NotFoundError(absl::StrCat("no process '", which, "' to restart"));
  }
  if (worker >= 0) killed_[worker] = true;
  if (gracefully) {
    (*slot)->Signal(SIGTERM);
    (*slot)->Finish(options_.stop_grace);
  } else {
    (*slot)->KillGroup();
  }
  const Endpoint ports = endpoints_[which];
  absl::StatusOr<Endpoint> started = StartAndWait(which, argv_[which], *slot, &ports);
  if (worker >= 0) killed_[worker] = false;
  return started.status();
}

void LocalCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // Signal a whole tier at once, then wait for it: stopping W workers one after the
  // other would cost W grace periods when a step is in flight. One SIGTERM each: a
  // second one tells a process to skip its drain.
  for (auto* tier : {&workers_, &shards_}) {
    for (auto& child : *tier) {
      if (child != nullptr && child->Running()) child->Signal(SIGTERM);
    }
    for (auto& child : *tier) {
      if (child != nullptr) child->Finish(options_.stop_grace);
    }
  }
  if (coordinator_ != nullptr) coordinator_->Stop(options_.stop_grace);
}

}  // namespace tributary::cli
