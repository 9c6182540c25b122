// What every Tributary binary promises an operator, checked on the real binaries
// started as child processes on port 0: server reflection lists its service and the
// health service and describes its API; grpc.health.v1 answers SERVING for the server
// and for its service; GET /healthz is 200 and /metrics parses as Prometheus text;
// one read-only RPC of its own service answers; and on SIGTERM health goes NOT_SERVING
// while the server still answers (the drain, --drain_seconds), then the process
// exits with status 0. Its long-lived threads carry the names docs/architecture.md
// lists (what `top -H` and `perf` show).
#include <gmock/gmock.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/child_process.h"
#include "cli/local_cluster.h"
#include "common/testing/prometheus_text.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace tributary {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::Contains;

// Long enough that a client polling health sees the drain; the test never measures it.
constexpr int kDrainSeconds = 3;
// Upper bounds for things that take well under a second on an idle machine. They only
// turn a hang into a failure with the process's log, on a shared and loaded machine.
constexpr absl::Duration kStartBound = absl::Seconds(90);
constexpr absl::Duration kExitBound = absl::Seconds(60);

std::string TempPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return absl::StrCat(root == nullptr ? "/tmp" : root, "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::chrono::system_clock::time_point In(absl::Duration duration) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(duration);
}

// grpc.health.v1.Health/Check: the status, or the RPC's error code as a negative number.
int CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(In(absl::Seconds(5)));
  const grpc::Status status = Health::NewStub(channel)->Check(&context, request, &response);
  if (!status.ok()) return -static_cast<int>(status.error_code());
  return response.status();
}

// ServerReflectionInfo with one request; every response of the stream.
std::vector<grpc::reflection::v1alpha::ServerReflectionResponse> Reflect(
    const std::shared_ptr<grpc::Channel>& channel,
    const grpc::reflection::v1alpha::ServerReflectionRequest& request) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(In(absl::Seconds(10)));
  auto stream = stub->ServerReflectionInfo(&context);
  EXPECT_TRUE(stream->Write(request));
  stream->WritesDone();
  std::vector<grpc::reflection::v1alpha::ServerReflectionResponse> responses;
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  while (stream->Read(&response)) responses.push_back(response);
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return responses;
}

// What `grpcurl -plaintext HOST:PORT list` shows.
std::vector<std::string> ListServices(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  std::vector<std::string> names;
  for (const auto& response : Reflect(channel, request)) {
    for (const auto& service : response.list_services_response().service()) {
      names.push_back(service.name());
    }
  }
  return names;
}

// What `grpcurl describe SERVICE` starts from: the file declaring the symbol and the
// methods it declares for that service.
struct Described {
  std::string file;
  std::vector<std::string> methods;
};

Described Describe(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_file_containing_symbol(service);
  Described described;
  for (const auto& response : Reflect(channel, request)) {
    if (response.has_error_response()) {
      ADD_FAILURE() << "reflection error for " << service << ": "
                    << response.error_response().error_message();
    }
    for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      if (!file.ParseFromString(bytes)) continue;
      for (const auto& declared : file.service()) {
        if (absl::StrCat(file.package(), ".", declared.name()) != service) continue;
        described.file = file.name();
        for (const auto& method : declared.method()) described.methods.push_back(method.name());
      }
    }
  }
  return described;
}

// A binary started as a child process with its ports from --port_file.
struct Running {
  std::unique_ptr<ChildProcess> process;
  int grpc_port = 0;
  int http_port = 0;
  std::shared_ptr<grpc::Channel> channel;

  std::string address() const { return absl::StrCat("127.0.0.1:", grpc_port); }
  std::string Log() const { return process == nullptr ? "" : process->LogTail(40); }
};

// Starts `binary` with `flags` on loopback port 0 and waits until its health check
// answers SERVING. The failure names the binary and shows its log.
absl::StatusOr<Running> Start(const std::string& name, const std::string& binary,
                              std::vector<std::string> flags) {
  const std::string port_file = TempPath(name + ".ports.json");
  std::remove(port_file.c_str());
  // Without a cluster credential: tests/security covers the credential.
  std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0", "--http_port=0",
                                   "--port_file=" + port_file, "--allow_unauthenticated"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(name, argv, TempPath(name + ".log"));
  if (!child.ok()) return child.status();
  Running running;
  running.process = *std::move(child);
  const absl::Time give_up = absl::Now() + kStartBound;
  while (true) {
    if (!running.process->Running()) {
      return absl::UnavailableError(absl::StrCat(name, " ", running.process->ExitDescription(),
                                                 " before serving:\n", running.Log()));
    }
    if (running.channel == nullptr) {
      std::smatch grpc_port, http_port;
      const std::string ports = ReadFile(port_file);
      if (std::regex_search(ports, grpc_port, std::regex("\"grpc_port\":(\\d+)")) &&
          std::regex_search(ports, http_port, std::regex("\"http_port\":(\\d+)"))) {
        running.grpc_port = std::stoi(grpc_port[1]);
        running.http_port = std::stoi(http_port[1]);
        running.channel =
            grpc::CreateChannel(running.address(), grpc::InsecureChannelCredentials());
      }
    }
    if (running.channel != nullptr &&
        CheckHealth(running.channel, "") == HealthCheckResponse::SERVING) {
      return running;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          name, " not SERVING within ", absl::FormatDuration(kStartBound), ":\n", running.Log()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

cli::LocalClusterOptions Binaries() {
  cli::LocalClusterOptions options;
  const absl::Status located = cli::LocateBinaries("", "", options);
  EXPECT_TRUE(located.ok()) << located;
  return options;
}

// Everything a running binary must show before it is asked to stop.
void ExpectServes(Running& binary, const std::string& service, const std::string& proto_file,
                  const std::vector<std::string>& own_metric_families) {
  SCOPED_TRACE(service);
  // Reflection: `grpcurl list` and `grpcurl describe`.
  const std::vector<std::string> services = ListServices(binary.channel);
  EXPECT_THAT(services, Contains(service));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));
  const Described described = Describe(binary.channel, service);
  EXPECT_EQ(described.file, proto_file);
  const auto* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  ASSERT_NE(descriptor, nullptr);
  std::vector<std::string> compiled_methods;
  for (int i = 0; i < descriptor->method_count(); ++i) {
    compiled_methods.push_back(descriptor->method(i)->name());
  }
  EXPECT_EQ(described.methods, compiled_methods) << "the binary serves another API version";

  // Health, for the whole server and for its service by name.
  EXPECT_EQ(CheckHealth(binary.channel, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(binary.channel, service), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(binary.channel, "tributary.v1.NoSuchService"),
            -grpc::StatusCode::NOT_FOUND);

  // The HTTP side port.
  httplib::Client http("127.0.0.1", binary.http_port);
  http.set_read_timeout(10, 0);
  auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz) << "GET /healthz: " << httplib::to_string(healthz.error());
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "SERVING\n");
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics) << "GET /metrics: " << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  absl::StatusOr<testing::ParsedMetrics> parsed = testing::ParsePrometheusText(metrics->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << metrics->body;
  // Its own registry is the one served, with the RPC counter of the health checks above.
  EXPECT_GE(parsed->Sum("tributary_rpc_total", "/grpc.health.v1.Health/Check"), 3) << metrics->body;
  for (const std::string& family : own_metric_families) {
    EXPECT_EQ(parsed->types.count(family), 1u) << family << " missing:\n" << metrics->body;
  }
}

// The names of the process's threads (/proc/<pid>/task/*/comm) once every one of
// `expected` is among them, or whatever they are after kStartBound (threads start
// beside serving: the worker's heartbeat once it registered).
std::set<std::string> ThreadNamesOnceThere(Running& binary,
                                           const std::vector<std::string>& expected) {
  const std::string tasks = absl::StrCat("/proc/", binary.process->pid(), "/task");
  std::set<std::string> names;
  for (const absl::Time give_up = absl::Now() + kStartBound;;
       absl::SleepFor(absl::Milliseconds(50))) {
    names.clear();
    std::error_code error;
    for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
      std::string name = ReadFile(task.path().string() + "/comm");
      if (!name.empty() && name.back() == '\n') name.pop_back();
      names.insert(name);
    }
    bool all = true;
    for (const std::string& name : expected) all &= names.count(name) == 1;
    if (all || absl::Now() >= give_up) return names;
  }
}

void ExpectThreadsNamed(Running& binary, const std::vector<std::string>& expected) {
  const std::set<std::string> names = ThreadNamesOnceThere(binary, expected);
  for (const std::string& name : expected) {
    EXPECT_THAT(names, Contains(name)) << binary.process->name() << "'s threads";
  }
}

// SIGTERM: health must answer NOT_SERVING while the server still runs (the drain),
// then the process must exit 0.
void ExpectDrainsOnSigterm(Running& binary, const std::string& service) {
  SCOPED_TRACE(service);
  binary.process->Signal(SIGTERM);
  int overall = HealthCheckResponse::SERVING;
  const absl::Time give_up = absl::Now() + kExitBound;
  // A health answer of NOT_SERVING proves the server still answers while draining.
  while (overall == HealthCheckResponse::SERVING && absl::Now() < give_up) {
    overall = CheckHealth(binary.channel, "");
  }
  EXPECT_EQ(overall, HealthCheckResponse::NOT_SERVING)
      << "health never answered NOT_SERVING after SIGTERM (negative: the RPC's error code)\n"
      << binary.Log();
  // Read right after: still within the drain on any but a badly stalled machine. An
  // answer (rather than a refused connection) must say NOT_SERVING too.
  const int per_service = CheckHealth(binary.channel, service);
  if (per_service >= 0) {
    EXPECT_EQ(per_service, HealthCheckResponse::NOT_SERVING);
  }
  httplib::Client http("127.0.0.1", binary.http_port);
  http.set_read_timeout(5, 0);
  if (auto healthz = http.Get("/healthz")) {
    EXPECT_EQ(healthz->status, 503);
    EXPECT_EQ(healthz->body, "NOT_SERVING\n");
  }

  // Connections of this test would hold the server's shutdown up to its deadline.
  binary.channel.reset();
  ASSERT_TRUE(binary.process->Wait(kExitBound))
      << binary.process->name() << " still runs " << absl::FormatDuration(kExitBound)
      << " after SIGTERM:\n"
      << binary.Log();
  EXPECT_EQ(binary.process->ExitDescription(), "exited with code 0") << binary.Log();
  const std::string log = ReadFile(binary.process->log_path());
  EXPECT_THAT(log, ::testing::HasSubstr("SIGTERM received")) << log;
  EXPECT_THAT(log, ::testing::HasSubstr(absl::StrCat("draining for ", kDrainSeconds, "s"))) << log;
}

TEST(BinariesTest, CoordinatorServesAndDrainsOnSigterm) {
  const cli::LocalClusterOptions binaries = Binaries();
  absl::StatusOr<Running> coordinator = Start("coordinator", binaries.coordinator_binary,
                                              {absl::StrCat("--drain_seconds=", kDrainSeconds)});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ExpectServes(*coordinator, "tributary.v1.Coordinator", "proto/coordinator.proto",
               {"tributary_coordinator_generation", "tributary_coordinator_workers"});
  ExpectThreadsNamed(*coordinator,
                     {"coord-control", "coord-shards", "coord-timer", "http", "signals"});

  {
    // Scoped: a stub keeps the connection open, which would hold up the shutdown.
    auto stub = v1::Coordinator::NewStub(coordinator->channel);
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::ClusterStatus status;
    const grpc::Status called =
        stub->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status);
    ASSERT_TRUE(called.ok()) << called.error_message();
    EXPECT_EQ(status.waiting_reason(), "no job submitted");
    EXPECT_EQ(status.expected_shards(), 1u);
  }

  ExpectDrainsOnSigterm(*coordinator, "tributary.v1.Coordinator");
}

TEST(BinariesTest, ParameterServerServesAndDrainsOnSigterm) {
  const cli::LocalClusterOptions binaries = Binaries();
  // Standalone (no --coordinator): the shard serves with no job installed.
  absl::StatusOr<Running> shard =
      Start("parameter_server", binaries.parameter_server_binary,
            {absl::StrCat("--drain_seconds=", kDrainSeconds), "--summation_threads=1"});
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectServes(*shard, "tributary.v1.ParameterServer", "proto/parameter_server.proto",
               {"tributary_ps_pushes_total", "tributary_ps_generation",
                "tributary_ps_data_plane_connections", "tributary_ps_data_plane_tickets"});
  ExpectThreadsNamed(*shard, {"ps-apply-0", "ps-control-0", "ps-accept", "checkpoint", "http",
                              "signals"});

  {
    auto stub = v1::ParameterServer::NewStub(shard->channel);
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::ShardStatus status;
    const grpc::Status called =
        stub->GetShardStatus(&context, v1::GetShardStatusRequest(), &status);
    ASSERT_TRUE(called.ok()) << called.error_message();
    EXPECT_EQ(status.job_id(), "");
    EXPECT_EQ(status.partitions_size(), 0);
  }

  ExpectDrainsOnSigterm(*shard, "tributary.v1.ParameterServer");
}

// The worker needs a coordinator: it registers at start and deregisters on SIGTERM,
// so the coordinator's worker list shows it come and go.
TEST(BinariesTest, WorkerServesRegistersAndDrainsOnSigterm) {
  const cli::LocalClusterOptions binaries = Binaries();
  absl::StatusOr<Running> coordinator =
      Start("worker-coordinator", binaries.coordinator_binary, {"--drain_seconds=0"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<Running> worker =
      Start("worker", binaries.worker_binary,
            {"--coordinator=" + coordinator->address(), "--node=binaries-test", "--devices=cpu",
             absl::StrCat("--drain_seconds=", kDrainSeconds)});
  ASSERT_TRUE(worker.ok()) << worker.status();
  ExpectServes(*worker, "tributary.v1.Worker", "proto/worker.proto",
               {"tributary_worker_generation", "tributary_worker_steps_completed"});

  auto coordinator_stub = v1::Coordinator::NewStub(coordinator->channel);
  auto workers = [&]() {
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::ListWorkersResponse response;
    const grpc::Status called =
        coordinator_stub->ListWorkers(&context, v1::ListWorkersRequest(), &response);
    EXPECT_TRUE(called.ok()) << called.error_message();
    return response;
  };
  // Registration runs beside serving: wait until the coordinator lists the worker.
  v1::ListWorkersResponse listed = workers();
  for (const absl::Time give_up = absl::Now() + kStartBound;
       listed.workers_size() == 0 && absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(50))) {
    listed = workers();
  }
  ASSERT_EQ(listed.workers_size(), 1) << worker->Log();
  EXPECT_EQ(listed.workers(0).node_name(), "binaries-test");
  EXPECT_EQ(listed.workers(0).grpc_port(), static_cast<uint32_t>(worker->grpc_port));
  EXPECT_EQ(listed.workers(0).pid(), static_cast<uint32_t>(worker->process->pid()));
  ExpectThreadsNamed(*worker, {"train", "heartbeat", "http", "signals"});

  {
    auto worker_stub = v1::Worker::NewStub(worker->channel);
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::WorkerStatus status;
    const grpc::Status called =
        worker_stub->GetStatus(&context, v1::GetWorkerStatusRequest(), &status);
    ASSERT_TRUE(called.ok()) << called.error_message();
    EXPECT_EQ(status.worker_id(), listed.workers(0).worker_id());
    EXPECT_EQ(status.node_name(), "binaries-test");
    EXPECT_EQ(status.phase(), v1::WORKER_IDLE);
  }

  ExpectDrainsOnSigterm(*worker, "tributary.v1.Worker");
  // It deregistered on the way out (a silent worker would stay listed until the
  // coordinator's 10 s heartbeat timeout).
  EXPECT_EQ(workers().workers_size(), 0) << coordinator->Log();
}

}  // namespace
}  // namespace tributary
