// The coordinator binary across restarts and with its flags: the job, its event log,
// its last step, the generation counter and the PS shard map survive a crash
// (SIGKILL) when --state_dir is set; workers register again and a new generation
// forms; a torn state file is detected and reported, and the binary refuses to start
// rather than silently losing the jobs; --control_token_file guards job control;
// impossible flag values are refused by name.
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/service_host.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/coordinator/testing/fake_parameter_server.h"
#include "tests/coordinator/command.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tributary {
namespace {

using ::testing::HasSubstr;
using ::tributary::testing::RunningCoordinator;

std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class FakeShard {
 public:
  FakeShard() : ps_(0), host_(Options()) {
    host_.AddService(&ps_, v1::ParameterServer::service_full_name());
    EXPECT_TRUE(host_.Start().ok());
    host_.SetServing(true);
  }
  ~FakeShard() { host_.Shutdown(absl::Seconds(1)); }
  coordinator::testing::FakeParameterServer& ps() { return ps_; }
  std::string address() const { return host_.advertised_address(); }

 private:
  static ServerOptions Options() {
    ServerOptions options;
    options.name = "fake-ps";
    options.listen_address = "127.0.0.1:0";
    options.http_port = -1;
    options.drain_grace = absl::ZeroDuration();
    return options;
  }
  coordinator::testing::FakeParameterServer ps_;
  ServiceHost host_;
};

std::string RegisterWorker(RunningCoordinator& coordinator, int port) {
  v1::RegisterWorkerRequest request;
  request.set_node_name("node-a");
  request.set_host("127.0.0.1");
  request.set_grpc_port(port);
  request.add_devices()->set_kind(v1::CPU);
  v1::RegisterWorkerResponse reply;
  const grpc::Status status = coordinator.stub->RegisterWorker(Context().get(), request, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return reply.worker_id();
}

// Heartbeats (IDLE) until the answer carries an assignment; its generation, or 0.
uint64_t AwaitGeneration(RunningCoordinator& coordinator, const std::string& worker) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    v1::HeartbeatRequest beat;
    beat.set_worker_id(worker);
    beat.set_phase(v1::WORKER_IDLE);
    v1::HeartbeatResponse reply;
    if (coordinator.stub->Heartbeat(Context().get(), beat, &reply).ok() &&
        reply.action() == v1::ACTION_RENDEZVOUS) {
      return reply.assignment().generation();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

grpc::Status Train(RunningCoordinator& coordinator, const std::string& worker, uint64_t generation,
                   uint64_t step) {
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);
  beat.set_generation(generation);
  beat.set_phase(v1::WORKER_TRAINING);
  beat.set_step(step);
  beat.set_loss(1.0f);
  beat.set_samples_per_second(100);
  beat.set_total_steps(100);
  v1::HeartbeatResponse reply;
  return coordinator.stub->Heartbeat(Context().get(), beat, &reply);
}

const std::vector<std::string> kFlags = {"--ps_shards=1", "--settle_window=0s",
                                         "--heartbeat_timeout=10m"};

TEST(CoordinatorRestartTest, StateSurvivesACrashAndWorkersRejoin) {
  FakeShard shard;
  const std::string state_dir = testing::TempPath("state");
  std::vector<std::string> flags = kFlags;
  flags.push_back("--state_dir=" + state_dir);
  absl::StatusOr<RunningCoordinator> first = testing::StartCoordinator(flags, "first");
  ASSERT_TRUE(first.ok()) << first.status();

  v1::RegisterParameterServerRequest register_shard;
  register_shard.set_address(shard.address());
  register_shard.set_shard_index(0);
  v1::RegisterParameterServerResponse registered;
  ASSERT_TRUE(
      first->stub->RegisterParameterServer(Context().get(), register_shard, &registered).ok());
  v1::SubmitJobRequest submit;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec": {"name": "survivor", "dataset": {"format": "SYNTHETIC"}}})", &submit)
                  .ok());
  v1::Job job;
  ASSERT_TRUE(first->stub->SubmitJob(Context().get(), submit, &job).ok());
  const std::string worker = RegisterWorker(*first, 7001);
  ASSERT_EQ(AwaitGeneration(*first, worker), 1u) << first->Log();
  shard.ps().Install(job.job_id(), 1, 1, 0);  // Worker 1 of generation 1.
  shard.ps().SetTraffic(5, 1000, 2000, 0.001);
  ASSERT_TRUE(Train(*first, worker, 1, 5).ok());
  v1::JobControlRequest pause;
  pause.set_reason("maintenance");
  v1::Job paused;
  ASSERT_TRUE(first->stub->PauseJob(Context().get(), pause, &paused).ok());

  // A crash: no chance to write anything on the way out.
  ASSERT_TRUE(first->Stop(SIGKILL).ok());
  absl::StatusOr<RunningCoordinator> second = testing::StartCoordinator(flags, "second");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(second->Log(), HasSubstr("coordinator state loaded from"));

  v1::Job restored;
  ASSERT_TRUE(second->stub->GetJob(Context().get(), v1::GetJobRequest(), &restored).ok());
  EXPECT_EQ(restored.job_id(), job.job_id());
  EXPECT_EQ(restored.state(), v1::PAUSED);
  EXPECT_EQ(restored.step(), 5u);
  EXPECT_EQ(restored.generation(), 1u);
  std::string events;
  for (const v1::JobEvent& event : restored.events())
    absl::StrAppend(&events, event.reason(), "\n");
  EXPECT_THAT(events, HasSubstr("paused: maintenance"));
  EXPECT_THAT(events, HasSubstr("coordinator restarted"));

  // The old worker id is unknown: the worker registers again. The shard is remembered.
  EXPECT_EQ(Train(*second, worker, 1, 5).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::Job resumed;
  ASSERT_TRUE(second->stub->ResumeJob(Context().get(), v1::JobControlRequest(), &resumed).ok());
  EXPECT_EQ(resumed.state(), v1::RENDEZVOUS);
  const std::string again = RegisterWorker(*second, 7001);
  EXPECT_EQ(AwaitGeneration(*second, again), 2u) << second->Log();
  const std::vector<v1::BeginGenerationRequest> begun = shard.ps().begun();
  ASSERT_EQ(begun.size(), 3u) << "generation 1, then the fence and the begin of generation 2";
  EXPECT_TRUE(begun[1].fence());
  EXPECT_EQ(begun[1].generation(), 2u);
  EXPECT_FALSE(begun[2].fence());
  EXPECT_EQ(begun[2].generation(), 2u);
  EXPECT_EQ(begun[2].resume_step(), 5u) << "the shards' step is where training resumes";
  ASSERT_TRUE(second->Stop(SIGTERM).ok());
}

TEST(CoordinatorRestartTest, TornStateFileIsDetectedAndNotUsed) {
  const std::string state_dir = testing::TempPath("torn");
  std::vector<std::string> flags = kFlags;
  flags.push_back("--state_dir=" + state_dir);
  {
    absl::StatusOr<RunningCoordinator> first = testing::StartCoordinator(flags, "torn-first");
    ASSERT_TRUE(first.ok()) << first.status();
    v1::SubmitJobRequest submit;
    submit.mutable_spec()->set_name("to-be-torn");
    v1::Job job;
    ASSERT_TRUE(first->stub->SubmitJob(Context().get(), submit, &job).ok());
    ASSERT_TRUE(first->Stop(SIGTERM).ok());
  }
  const std::string current = state_dir + "/coordinator_state.json";
  const std::string previous = state_dir + "/coordinator_state.prev.json";
  const std::string whole = ReadAll(current);
  ASSERT_THAT(whole, HasSubstr("to-be-torn"));

  // Only the current file torn: the previous version is used, and the log says so.
  std::ofstream(current, std::ios::trunc) << whole.substr(0, whole.size() / 2);
  {
    absl::StatusOr<RunningCoordinator> second = testing::StartCoordinator(flags, "torn-second");
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_THAT(second->Log(), HasSubstr("is torn"));
    EXPECT_THAT(second->Log(), HasSubstr("using the previous version"));
    ASSERT_TRUE(second->Stop(SIGTERM).ok());
  }

  // Both torn: the coordinator refuses to start and names the files.
  const std::string now = ReadAll(current);
  std::ofstream(current, std::ios::trunc) << now.substr(0, now.size() / 2);
  const std::string before = ReadAll(previous);
  std::ofstream(previous, std::ios::trunc) << before.substr(0, before.size() / 2);
  absl::StatusOr<RunningCoordinator> third = testing::StartCoordinator(flags, "torn-third");
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(third.status().message(), HasSubstr("cannot start the coordinator"));
  EXPECT_THAT(third.status().message(), HasSubstr(current));
  EXPECT_THAT(third.status().message(), HasSubstr("Remove the state directory's files"));
}

TEST(CoordinatorRestartTest, ControlTokenFileGuardsJobControl) {
  const std::string token_file = testing::TempPath("token");
  std::ofstream(token_file) << "  op3rator-token\n";
  std::vector<std::string> flags = kFlags;
  flags.push_back("--control_token_file=" + token_file);
  absl::StatusOr<RunningCoordinator> coordinator = testing::StartCoordinator(flags, "token");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  v1::SubmitJobRequest submit;
  v1::Job job;
  EXPECT_EQ(coordinator->stub->SubmitJob(Context().get(), submit, &job).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(coordinator->stub->SubmitJob(Context("op3rator-token").get(), submit, &job).ok());
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(coordinator->stub->ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  ASSERT_TRUE(coordinator->Stop(SIGTERM).ok());
}

TEST(CoordinatorRestartTest, ImpossibleFlagsAreRefusedByName) {
  const std::string empty_token = testing::TempPath("empty-token");
  std::ofstream(empty_token) << "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--control_token_file=" + empty_token, "the file is empty"},
      {"--heartbeat_timeout=500ms", "--heartbeat_timeout (500ms) must be longer"},
      {"--ps_shards=0", "--ps_shards must be in [1, 1024], got 0"},
      {"--ps_shards=100000", "--ps_shards must be in [1, 1024], got 100000"},
      {"--upload_idle_timeout=0s", "--upload_idle_timeout must be > 0"},
  };
  for (const auto& [flag, message] : cases) {
    absl::StatusOr<RunningCoordinator> coordinator = testing::StartCoordinator({flag}, "bad");
    ASSERT_FALSE(coordinator.ok()) << flag;
    EXPECT_THAT(coordinator.status().message(), HasSubstr(message)) << flag;
  }
}

}  // namespace
}  // namespace tributary
