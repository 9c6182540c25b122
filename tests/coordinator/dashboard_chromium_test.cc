// Renders the coordinator's dashboard in headless Chromium (Debian's `chromium`)
// against the real coordinator binary with registered fake workers, a fake PS shard
// and a running job, and checks that what the page must show is in the rendered DOM:
// job state and progress, the loss and accuracy curves, nodes with workers, GPUs,
// ranks, heartbeat age and the straggler mark, the shard's traffic, the event log.
// Skips, saying why, when Chromium is not installed.
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <regex>

#include "absl/strings/str_cat.h"
#include "common/service_host.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/coordinator/testing/fake_parameter_server.h"
#include "tests/coordinator/command.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tributary {
namespace {

using ::testing::HasSubstr;
using ::tributary::testing::RunningCoordinator;

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

v1::Device Gpu(int index, const std::string& node) {
  v1::Device device;
  device.set_kind(v1::GPU);
  device.set_index(index);
  device.set_uuid(absl::StrCat("GPU-", node, "-", index));
  device.set_name("NVIDIA H100 80GB HBM3");
  device.set_memory_bytes(80ull << 30);
  return device;
}

std::string RegisterWorker(RunningCoordinator& coordinator, const std::string& node, int port) {
  v1::RegisterWorkerRequest request;
  request.set_node_name(node);
  request.set_host("10.0.0." + std::to_string(port % 100));
  request.set_grpc_port(port);
  request.set_pid(port);
  request.set_version("test");
  *request.add_devices() = Gpu(0, node);
  *request.add_devices() = Gpu(1, node);
  v1::RegisterWorkerResponse reply;
  const grpc::Status status = coordinator.stub->RegisterWorker(Context().get(), request, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return reply.worker_id();
}

v1::HeartbeatResponse Beat(RunningCoordinator& coordinator, const std::string& worker,
                           uint64_t generation, uint64_t step, double step_seconds) {
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);
  beat.set_generation(generation);
  beat.set_phase(generation == 0 ? v1::WORKER_IDLE : v1::WORKER_TRAINING);
  beat.set_step(step);
  beat.set_epoch(static_cast<uint32_t>(step / 10));
  beat.set_loss(2.3f / (1.0f + 0.2f * step));
  beat.set_test_accuracy(step >= 10 ? 0.5f + 0.02f * step : -1);
  if (step >= 10) {
    // A model's named metrics and its test loss ride with the evaluation.
    beat.set_test_accuracy_step(step);
    beat.set_test_loss(1.5f - 0.05f * step);
    (*beat.mutable_test_metrics())["token_accuracy"] = 0.25 + 0.01 * step;
  }
  beat.set_samples_per_second(1000 + 10 * step);
  beat.set_step_seconds(step_seconds);
  beat.set_push_wait_seconds(0.002);
  beat.set_steps_per_epoch(10);
  beat.set_total_steps(30);
  beat.set_bytes_pushed(step << 20);
  v1::HeartbeatResponse reply;
  const grpc::Status status = coordinator.stub->Heartbeat(Context().get(), beat, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return reply;
}

TEST(DashboardChromiumTest, PageShowsTheCluster) {
  const std::optional<std::string> chromium =
      testing::FindProgram({"chromium", "chromium-browser"});
  if (!chromium.has_value()) {
    GTEST_SKIP() << "headless Chromium is not installed (Debian package 'chromium'; "
                    "scripts/setup installs it): the dashboard is not rendered by this run";
  }

  // A fake PS shard the coordinator polls for the shard table.
  coordinator::testing::FakeParameterServer ps(0);
  ServerOptions ps_options;
  ps_options.name = "fake-ps";
  ps_options.listen_address = "127.0.0.1:0";
  ps_options.http_port = -1;
  ps_options.drain_grace = absl::ZeroDuration();
  ServiceHost ps_host(ps_options);
  ps_host.AddService(&ps, v1::ParameterServer::service_full_name());
  ASSERT_TRUE(ps_host.Start().ok());
  ps_host.SetServing(true);

  absl::StatusOr<RunningCoordinator> started =
      testing::StartCoordinator({"--ps_shards=1", "--settle_window=0s", "--heartbeat_timeout=10m",
                                 "--shard_poll_interval=100ms"},
                                "dashboard");
  ASSERT_TRUE(started.ok()) << started.status();
  RunningCoordinator& coordinator = *started;

  v1::RegisterParameterServerRequest shard;
  shard.set_address(ps_host.advertised_address());
  shard.set_shard_index(0);
  v1::RegisterParameterServerResponse shard_reply;
  ASSERT_TRUE(coordinator.stub->RegisterParameterServer(Context().get(), shard, &shard_reply).ok());

  const std::string a0 = RegisterWorker(coordinator, "gpu-node-a", 7100);
  const std::string a1 = RegisterWorker(coordinator, "gpu-node-a", 7101);
  const std::string b0 = RegisterWorker(coordinator, "gpu-node-b", 7200);
  v1::SubmitJobRequest submit;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec": {"name": "dashboard-demo", "dataset": {"format": "SYNTHETIC"},
                      "devices": "GPU", "nodesMin": 2, "nodesMax": 2, "epochs": 3}})",
                  &submit)
                  .ok());
  v1::Job job;
  ASSERT_TRUE(coordinator.stub->SubmitJob(Context().get(), submit, &job).ok());

  // Idle heartbeats until the generation forms, then training progress.
  uint64_t generation = 0;
  v1::Assignment assignment;
  for (int attempt = 0; attempt < 3000 && generation == 0; ++attempt) {
    const v1::HeartbeatResponse reply = Beat(coordinator, a0, 0, 0, 0);
    if (reply.action() == v1::ACTION_RENDEZVOUS) {
      assignment = reply.assignment();
      generation = assignment.generation();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(generation, 1u) << coordinator.Log();
  ps.Install(job.job_id(), generation, assignment.num_nodes(), assignment.resume_step());
  ps.SetTraffic(12, 3ull << 30, 5ull << 30, 0.0125);
  for (uint64_t step = 0; step <= 12; ++step) {
    Beat(coordinator, a0, generation, step, 0.05);
    Beat(coordinator, a1, generation, step, 0.05);
    Beat(coordinator, b0, generation, step, 0.20);  // The straggler.
  }

  const std::string profile = testing::TempPath("chromium-profile");
  const std::string url = absl::StrCat("http://127.0.0.1:", coordinator.http_port, "/");
  absl::StatusOr<testing::CommandResult> rendered = testing::RunCommand(
      {*chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
       "--disable-background-networking", "--disable-component-update", "--disable-sync",
       "--disable-dev-shm-usage", "--user-data-dir=" + profile, "--virtual-time-budget=5000",
       "--dump-dom", url},
      {{"HOME", profile}}, absl::Seconds(120));
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  ASSERT_EQ(rendered->exit_code, 0) << rendered->errors;
  const std::string& dom = rendered->output;
  ASSERT_THAT(dom, HasSubstr("Tributary coordinator")) << rendered->errors;

  // Job state and progress.
  EXPECT_THAT(dom, HasSubstr(job.job_id()));
  EXPECT_THAT(dom, HasSubstr("dashboard-demo"));
  EXPECT_THAT(dom, HasSubstr("<span class=\"state RUNNING\">RUNNING</span>"));
  EXPECT_THAT(dom, HasSubstr("step 12 of 30"));
  EXPECT_THAT(dom, HasSubstr("epoch 2 of 3"));
  EXPECT_THAT(dom, HasSubstr("74.00 %")) << "latest test accuracy";
  // Curves are drawn as SVG polylines with a point per progress entry.
  const std::regex loss_curve(R"re(class="curve" data-label="loss" data-points="(\d+)")re");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(dom, match, loss_curve)) << "no loss curve drawn";
  EXPECT_GE(std::stoi(match[1]), 10);
  EXPECT_THAT(dom, HasSubstr("data-label=\"accuracy\""));
  EXPECT_THAT(dom, HasSubstr("data-label=\"samples/s\""));
  // The model's named metrics: a chart each, the test loss's, and the latest values.
  EXPECT_THAT(dom, HasSubstr("data-label=\"token_accuracy\""));
  EXPECT_THAT(dom, HasSubstr("data-label=\"test loss\""));
  EXPECT_THAT(dom, HasSubstr("<dd id=\"job-metrics\">token_accuracy 0.3700</dd>"));
  // Nodes, workers, GPUs, ranks, heartbeat age, straggler.
  EXPECT_THAT(dom, HasSubstr("gpu-node-a"));
  EXPECT_THAT(dom, HasSubstr("gpu-node-b"));
  for (const std::string& worker : {a0, a1, b0}) EXPECT_THAT(dom, HasSubstr(worker));
  EXPECT_THAT(dom, HasSubstr("GPU 1 NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(dom, HasSubstr("global 2/3, local 0/1 (leader)"));
  EXPECT_THAT(dom, HasSubstr("global 1/3, local 1/2"));
  EXPECT_THAT(dom, HasSubstr("class=\"straggler\""));
  EXPECT_THAT(dom, HasSubstr("heartbeat age"));
  // The straggler's row, cell by cell: step, loss, samples/s, step time, push wait and a
  // heartbeat age that is a real, small duration.
  const std::regex straggler_row(
      "<tr><td><span class=\"worker-id\">" + b0 +
      "</span> <span class=\"straggler\"[^<]*>straggler</span></td>"
      "<td>10\\.0\\.0\\.0:7200<br><span class=\"muted\">pid 7200</span></td>"
      "<td><span class=\"state WORKER_TRAINING\">WORKER_TRAINING</span></td>"
      "<td>[^<]*</td><td>[^/]*</td>"
      "<td>12</td><td>0\\.6765</td><td>1120\\.0</td><td>200 ms</td><td>2 ms</td>"
      "<td>(\\d+ ms|\\d+\\.\\d s)</td>");
  EXPECT_TRUE(std::regex_search(dom, match, straggler_row)) << "straggler row not as expected";
  for (const std::string& fast : {a0, a1}) {
    const std::regex row("<span class=\"worker-id\">" + fast +
                         "</span></td>(<td>(?:(?!</td>).)*</td>){4}<td>12</td><td>0\\.6765</td>"
                         "<td>1120\\.0</td><td>50 ms</td>");
    const size_t at = dom.find("worker-id\">" + fast);
    EXPECT_TRUE(std::regex_search(dom, row))
        << "row of " << fast
        << " not as expected: " << (at == std::string::npos ? "(absent)" : dom.substr(at, 600));
  }
  // The job's latest progress: mean loss, and the throughput of all three workers.
  EXPECT_THAT(dom, HasSubstr("<dd id=\"job-loss\">0.6765</dd>"));
  EXPECT_THAT(dom, HasSubstr("<dd id=\"job-throughput\">3360.0</dd>"));
  // The PS shard with its traffic and aggregation wait.
  EXPECT_THAT(dom, HasSubstr(ps_host.advertised_address()));
  EXPECT_THAT(dom, HasSubstr("3.0 GiB"));
  EXPECT_THAT(dom, HasSubstr("5.0 GiB"));
  EXPECT_THAT(dom, HasSubstr("13 ms"));
  // The event log.
  EXPECT_THAT(dom, HasSubstr("generation 1 formed: 2 node(s) [gpu-node-a, gpu-node-b]"));
  EXPECT_THAT(dom, HasSubstr("are training from step 0"));

  // For a look at the page: bazel test --test_env=DASHBOARD_SCREENSHOT=1 writes
  // dashboard.png into the test's undeclared outputs.
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (std::getenv("DASHBOARD_SCREENSHOT") != nullptr && outputs != nullptr) {
    const std::string png = absl::StrCat(outputs, "/dashboard.png");
    absl::StatusOr<testing::CommandResult> shot = testing::RunCommand(
        {*chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
         "--hide-scrollbars", "--window-size=1400,1900", "--virtual-time-budget=5000",
         "--screenshot=" + png, url},
        {{"HOME", profile}}, absl::Seconds(120));
    EXPECT_TRUE(shot.ok() && shot->exit_code == 0) << png;
  }

  ASSERT_TRUE(coordinator.Stop(SIGTERM).ok());
  ps_host.Shutdown(absl::Seconds(1));
}

}  // namespace
}  // namespace tributary
