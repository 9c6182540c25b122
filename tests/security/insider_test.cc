// An insider and a flood against a running job (issue 23). The insider holds the
// cluster secret (every worker does) and uses it as one would: it derives node and
// worker credentials from it and pushes as node 0 (once that took accuracy from 1.0 to
// 0.615), asks for data-plane tickets of ranks outside the generation (once 4,080 of
// them filled the ticket table), installs a plan far larger than the model, registers
// from a worker's endpoint (once that replaced the worker and ended the generation),
// and holds upload slots with silent UploadModel streams. Meanwhile a stranger keeps
// every data-plane place that owes a hello busy and re-opens each one that is closed
// (once that pushed both nodes onto gRPC for the rest of the job). The job must then
// complete with exactly the parameters of one replica training alone, and its nodes
// must still reach the data plane after a re-formation.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/parameters.h"
#include "common/child_process.h"
#include "common/cluster_auth.h"
#include "common/data_plane_wire.h"
#include "common/sha256.h"
#include "common/testing/prometheus_text.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "tests/security/forgery.h"
#include "tests/training/cluster_fixture.h"

namespace tributary::testing {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// The shard's counter of data-plane connections admitted with a valid ticket.
double AdmittedConnections(const std::string& run_dir) {
  std::ifstream in(run_dir + "/ps-0.ports.json");
  std::string ports((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch http;
  if (!std::regex_search(ports, http, std::regex("\"http_port\":([0-9]+)"))) return -1;
  httplib::Client client("127.0.0.1", std::stoi(http[1]));
  auto response = client.Get("/metrics");
  if (!response || response->status != 200) return -1;
  absl::StatusOr<ParsedMetrics> metrics = ParsePrometheusText(response->body);
  if (!metrics.ok()) return -1;
  return metrics->Sum("tributary_ps_data_plane_connections_total", "result=\"admitted\"");
}

// A stranger that keeps `count` connections to the data port open without a hello,
// and opens a new one for each that is closed.
class Flood {
 public:
  Flood(int port, int count) : port_(port) {
    thread_ = std::thread([this, count] {
      std::vector<int> open;
      while (!stop_) {
        for (int& fd : open) {
          pollfd check{fd, POLLIN, 0};
          if (::poll(&check, 1, 0) > 0) {
            ::close(fd);
            fd = -1;
            ++reopened_;
          }
        }
        open.erase(std::remove(open.begin(), open.end(), -1), open.end());
        while (static_cast<int>(open.size()) < count) {
          absl::StatusOr<int> fd = data_plane::Connect("127.0.0.1", port_, absl::Seconds(2));
          if (!fd.ok()) break;
          open.push_back(*fd);
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
      for (int fd : open) ::close(fd);
    });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
  }
  int reopened() const { return reopened_; }

 private:
  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> reopened_{0};
  std::thread thread_;
};

TEST(InsiderTest, AnInsiderAndAFloodChangeNothingOfARunningJob) {
  const int data_port = FreePort();
  ClusterShape shape;
  shape.ps_shards = 1;
  shape.ps_args = {absl::StrCat("--data_port=", data_port)};
  // The flood is on the TCP data port: the workers use it too (on one host they would
  // take the shard's local socket and pass the flood by).
  shape.worker_args = {"--ps_transport=tcp"};
  shape.coordinator_args = {"--upload_idle_timeout=1s"};
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("insider", shape);
  ASSERT_NE(cluster, nullptr);
  // On a failure, what every process said last (the run directory goes with the test).
  struct DumpLogsOnFailure {
    cli::LocalCluster* cluster;
    ~DumpLogsOnFailure() {
      if (!::testing::Test::HasFailure()) return;
      for (ChildProcess* process : cluster->processes()) {
        // The flood's own connections, refused by the thousand, say nothing.
        std::vector<std::string> said;
        for (absl::string_view line : absl::StrSplit(process->LogTail(5000), '\n')) {
          if (!absl::StrContains(line, "data plane connection")) said.emplace_back(line);
        }
        if (said.size() > 60) said.erase(said.begin(), said.end() - 60);
        std::printf("--- %s (%s):\n%s\n", process->name().c_str(),
                    process->ExitDescription().c_str(), absl::StrJoin(said, "\n").c_str());
      }
    }
  } dump{cluster.get()};
  const std::string token_file = cluster->cluster_token_file();
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth =
      ClusterAuth::FromFile("cluster_token_file", token_file);
  ASSERT_TRUE(auth.ok()) << auth.status();
  const Caller insider{"an insider", (*auth)->HeaderFor(Role::kWorker), ""};

  // Long enough (about 10 s here) to outlast everything below, a re-formation included.
  const uint64_t kSteps = 60000;
  v1::JobSpec spec = SyntheticJob(32, kSteps);
  spec.set_nodes_min(2);
  spec.set_nodes_max(2);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string job_id = submitted->job_id();
  absl::StatusOr<v1::Job> running = WaitForNodes(*cluster, job_id, 2, 20, absl::Minutes(2));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(running->state(), v1::RUNNING);
  Flood flood(data_port, 64);  // 64: every place a connection may owe its hello.

  const std::string shard = cluster->shard_addresses()[0];
  auto ps = v1::ParameterServer::NewStub(Plain(shard));
  auto derived_node = [&](uint64_t generation, uint32_t rank) {
    return DerivedFromTheSecret(
        token_file, absl::StrCat("tributary-node:", job_id, "/", generation, "/", rank));
  };
  // (3) A push as node 0, with node 0's credential as the secret derives it.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::Job> now = WaitForJob(
        *cluster, job_id, [](const v1::Job& job) { return job.state() == v1::RUNNING; },
        absl::Minutes(1));
    ASSERT_TRUE(now.ok()) << now.status();
    const Caller forger{"a forger", insider.auth_header, derived_node(now->generation(), 0)};
    const grpc::Status pushed = ForgedPush(shard, forger, *now, 0, 16);
    EXPECT_EQ(pushed.error_code(), grpc::StatusCode::PERMISSION_DENIED) << pushed.error_message();
  }
  // (8) Tickets for node ranks outside the 2-node generation.
  for (uint32_t rank = 2; rank < 300; rank += 37) {
    v1::OpenDataPlaneRequest open;
    open.set_job_id(job_id);
    open.set_generation(running->generation());
    open.set_node_rank(rank);
    v1::OpenDataPlaneResponse ticket;
    const Caller outside{"outside", insider.auth_header, derived_node(running->generation(), rank)};
    const grpc::Status refused = ps->OpenDataPlane(ContextOf(outside).get(), open, &ticket);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << rank;
  }
  // (9) A plan of 1,000 partitions of 4 MiB for the job's small model.
  {
    auto context =
        ContextOf(Caller{"a planner", insider.auth_header, derived_node(running->generation(), 0)});
    v1::InitPartitionsResponse response;
    auto writer = ps->InitPartitions(context.get(), &response);
    v1::InitPartitionsRequest request;
    v1::InitHeader& header = *request.mutable_header();
    header.set_job_id(job_id);
    *header.mutable_job() = spec;
    header.mutable_job()->set_partition_bytes(4 << 20);
    header.mutable_job()->set_partition_cut(v1::CUT_EVEN);
    header.set_generation(running->generation());
    header.set_num_nodes(2);
    v1::PartitionPlan& plan = *header.mutable_plan();
    plan.set_num_shards(1);
    plan.set_partition_bytes(4 << 20);
    plan.set_fingerprint("forged");
    for (uint32_t id = 0; id < 1000; ++id) {
      v1::Partition* partition = plan.add_partitions();
      partition->set_id(id);
      partition->set_offset(int64_t{id} << 20);
      partition->set_length(1 << 20);
    }
    plan.set_total_elements(int64_t{1000} << 20);
    writer->Write(request);
    writer->WritesDone();
    const grpc::Status refused = writer->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  }
  // (4) A registration from worker 0's endpoint (node, host, port and pid, all shown by
  // ListWorkers): a worker of its own; worker 0 keeps its record.
  auto coordinator = v1::Coordinator::NewStub(cluster->coordinator_channel());
  v1::ListWorkersResponse workers;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(coordinator->ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok());
  }
  ASSERT_EQ(workers.workers_size(), 2);
  const v1::WorkerInfo victim = workers.workers(0);  // A copy: `workers` is read again.
  {
    v1::RegisterWorkerRequest impostor;
    impostor.set_node_name(victim.node_name());
    impostor.set_host(victim.host());
    impostor.set_grpc_port(victim.grpc_port());
    impostor.set_http_port(victim.http_port());
    impostor.set_pid(victim.pid());
    *impostor.mutable_devices() = victim.devices();
    v1::RegisterWorkerResponse registered;
    auto plain = v1::Coordinator::NewStub(Plain(cluster->coordinator_address()));
    const grpc::Status status =
        plain->RegisterWorker(ContextOf(insider).get(), impostor, &registered);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_NE(registered.worker_id(), victim.worker_id());
  }
  // (7) Two silent uploads hold both upload slots until --upload_idle_timeout (1 s).
  {
    std::vector<std::thread> uploads;
    std::atomic<int> cancelled{0};
    for (int i = 0; i < 2; ++i) {
      uploads.emplace_back([&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        v1::UploadModelResponse response;
        auto stream = coordinator->UploadModel(&context, &response);
        v1::UploadModelRequest header;
        header.mutable_header()->set_file_name("silent.pt");
        header.mutable_header()->set_sha256(std::string(64, 'a'));
        header.mutable_header()->set_size_bytes(100 << 20);
        stream->Write(header);
        const grpc::Status ended = stream->Finish();
        if (ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
          ++cancelled;
        } else {
          ADD_FAILURE() << "a silent upload ended with " << ended.error_code() << ": "
                        << ended.error_message();
        }
      });
    }
    for (std::thread& upload : uploads) upload.join();
    EXPECT_EQ(cancelled, 2) << "both silent uploads were cut off";
    // Their slots are free again: a real upload goes through.
    // What the store checks of a TorchScript archive: a zip with data.pkl and version.
    const std::string file =
        std::string("PK\x03\x04", 4) + "m/data.pkl m/version" + std::string(1000, 'm');
    grpc::ClientContext context;
    v1::UploadModelResponse response;
    auto stream = coordinator->UploadModel(&context, &response);
    v1::UploadModelRequest header;
    header.mutable_header()->set_file_name("real.pt");
    header.mutable_header()->set_sha256(Sha256Hex(file));
    header.mutable_header()->set_size_bytes(file.size());
    v1::UploadModelRequest chunk;
    chunk.set_chunk(file);
    EXPECT_TRUE(stream->Write(header) && stream->Write(chunk));
    stream->WritesDone();
    const grpc::Status uploaded = stream->Finish();
    EXPECT_TRUE(uploaded.ok()) << uploaded.error_message();
  }

  // (5) A re-formation while the stranger floods the data port: both nodes reach the
  // data plane again (admitted with their tickets), not gRPC for the rest of the job.
  absl::StatusOr<v1::Job> before_restart = WaitForNodes(*cluster, job_id, 2, 0, absl::Minutes(1));
  ASSERT_TRUE(before_restart.ok()) << before_restart.status();
  const double admitted_before = AdmittedConnections(cluster->options().run_dir);
  ASSERT_GE(admitted_before, 2);
  const absl::Status left = cluster->KillAndRestart("worker-1", /*gracefully=*/true);
  ASSERT_TRUE(left.ok()) << left;
  absl::StatusOr<v1::Job> reformed =
      WaitForNodes(*cluster, job_id, 2, before_restart->step() + 500, absl::Minutes(2));
  ASSERT_TRUE(reformed.ok()) << reformed.status();
  ASSERT_EQ(reformed->state(), v1::RUNNING) << "the job ended before the check";
  EXPECT_GT(reformed->generation(), before_restart->generation());
  EXPECT_GE(AdmittedConnections(cluster->options().run_dir), admitted_before + 2)
      << "a node fell back to gRPC under the flood (" << admitted_before << " admitted before)";
  EXPECT_GT(flood.reopened(), 0) << "the flood was evicted and came back";

  // While the job runs: once it is over, workers leave (--exit_after_job).
  {
    grpc::ClientContext context;
    v1::ListWorkersResponse now;
    ASSERT_TRUE(coordinator->ListWorkers(&context, v1::ListWorkersRequest(), &now).ok());
    bool victim_kept = false;
    for (const v1::WorkerInfo& worker : now.workers()) {
      victim_kept = victim_kept || worker.worker_id() == victim.worker_id();
    }
    EXPECT_TRUE(victim_kept) << "the registration from its endpoint pushed worker 0 out";
  }
  absl::StatusOr<v1::Job> done = WaitForJob(*cluster, job_id, Finished, absl::Minutes(5));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->state_reason();
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->step, kSteps);
  EXPECT_LE(MaxRelativeDifference(pulled->values, ReferenceParameters(spec, kSteps)), 1e-5);
}

}  // namespace
}  // namespace tributary::testing
