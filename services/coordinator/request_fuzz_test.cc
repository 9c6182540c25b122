// The coordinator against hostile requests: a seeded mutation loop (common/testing/
// proto_mutator.h) over every request type its handlers take, from the corpus in
// testdata/fuzz/<type>/. Every mutated request is answered with a status (some only
// after a Tick, as a registration that waits for its generation), never a crash;
// afterwards the coordinator still forms a generation for a valid job.
// FUZZ_ITERATIONS sets the rounds; FUZZ_WRITE_CORPUS=DIR writes the seeds.
#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "common/testing/proto_mutator.h"
#include "services/coordinator/coordinator.h"

namespace tributary::coordinator {
namespace {

using tributary::testing::CorpusPath;
using tributary::testing::FuzzIterations;
using tributary::testing::ProtoMutator;
using tributary::testing::WriteSeed;

// Shards that answer like empty, reachable ones.
class EmptyShards : public ShardClient {
 public:
  absl::StatusOr<v1::ShardStatus> GetShardStatus(const v1::ShardInfo& shard) override {
    v1::ShardStatus status;
    status.set_shard_index(shard.shard_index());
    return status;
  }
  absl::StatusOr<v1::BeginGenerationResponse> BeginGeneration(
      const v1::ShardInfo&, const v1::BeginGenerationRequest&) override {
    return absl::FailedPreconditionError("holds no job");
  }
  absl::Status EndJob(const v1::ShardInfo&, const std::string&) override {
    return absl::NotFoundError("no job");
  }
};

TEST(RequestFuzzTest, WriteCorpusWhenAsked) {
  const char* dir = std::getenv("FUZZ_WRITE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "FUZZ_WRITE_CORPUS not set: the corpus is checked in";
  v1::RegisterWorkerRequest worker;
  worker.set_node_name("node-a");
  worker.set_host("10.0.0.7");
  worker.set_grpc_port(50071);
  worker.set_http_port(8082);
  v1::Device* cpu = worker.add_devices();
  cpu->set_kind(v1::CPU);
  cpu->set_name("cpu");
  v1::Device* gpu = worker.add_devices();
  gpu->set_kind(v1::GPU);
  gpu->set_index(0);
  gpu->set_uuid("GPU-0000");
  gpu->set_name("H100");
  WriteSeed(dir, "register_worker", "cpu_and_gpu", worker);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1-0000");
  beat.set_generation(1);
  beat.set_phase(v1::WORKER_TRAINING);
  beat.set_step(12);
  beat.set_loss(0.5f);
  beat.set_test_accuracy(0.8f);
  beat.set_samples_per_second(1000);
  WriteSeed(dir, "heartbeat", "training", beat);
  v1::DeregisterRequest leave;
  leave.set_worker_id("w1-0000");
  leave.set_reason("drain");
  WriteSeed(dir, "deregister", "drain", leave);
  v1::RegisterParameterServerRequest shard;
  shard.set_address("10.0.0.9:50061");
  shard.set_http_port(8081);
  shard.set_shard_index(0);
  WriteSeed(dir, "register_parameter_server", "shard_0", shard);
  v1::PublishRendezvousRequest publish;
  publish.set_rendezvous_id("job-1-0000/g1/node-a");
  publish.set_key("nccl_id");
  publish.set_value("abcdef");
  WriteSeed(dir, "publish_rendezvous", "nccl_id", publish);
  v1::SubmitJobRequest submit;
  v1::JobSpec& spec = *submit.mutable_spec();
  spec.set_name("fuzz");
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.set_global_batch_size(32);
  spec.set_max_steps(100);
  spec.set_nodes_min(1);
  spec.set_nodes_max(2);
  WriteSeed(dir, "submit_job", "synthetic", submit);
  v1::JobControlRequest control;
  control.set_reason("fuzz");
  WriteSeed(dir, "job_control", "active_job", control);
}

template <typename T>
std::vector<T> Seeds(const std::string& type) {
  std::vector<T> seeds;
  for (auto& message :
       ProtoMutator::LoadCorpus(CorpusPath("services/coordinator/testdata/fuzz/" + type), T())) {
    seeds.push_back(static_cast<const T&>(*message));
  }
  return seeds;
}

TEST(RequestFuzzTest, EveryRequestTypeIsAnsweredWithAStatus) {
  FLAGS_minloglevel = 3;  // Thousands of refusals would each be logged.
  FakeClock clock;
  EmptyShards shards;
  CoordinatorOptions options;
  options.ps_shards = 1;
  options.settle_window = absl::ZeroDuration();
  Coordinator coordinator(options, &clock, &shards);
  ASSERT_TRUE(coordinator.Start().ok());
  const auto workers = Seeds<v1::RegisterWorkerRequest>("register_worker");
  const auto beats = Seeds<v1::HeartbeatRequest>("heartbeat");
  const auto leaves = Seeds<v1::DeregisterRequest>("deregister");
  const auto shard_registrations =
      Seeds<v1::RegisterParameterServerRequest>("register_parameter_server");
  const auto publishes = Seeds<v1::PublishRendezvousRequest>("publish_rendezvous");
  const auto submits = Seeds<v1::SubmitJobRequest>("submit_job");
  const auto controls = Seeds<v1::JobControlRequest>("job_control");
  ASSERT_FALSE(workers.empty() || beats.empty() || leaves.empty() || shard_registrations.empty() ||
               publishes.empty() || submits.empty() || controls.empty());

  ProtoMutator mutator(20261125);
  int ok = 0, refused = 0, answered = 0, asked = 0;
  // Replies live until the test ends: some are answered only on a later Tick.
  std::deque<std::unique_ptr<google::protobuf::Message>> replies;
  auto done = [&](absl::Status status) {
    ++answered;
    status.ok() ? ++ok : ++refused;
  };
  const int iterations = FuzzIterations(3000);
  for (int i = 0; i < iterations; ++i) {
    auto ask = [&](auto handler, const auto& seeds, auto* reply) {
      auto request = mutator.Mutate(seeds[i % seeds.size()]);
      replies.emplace_back(reply);
      ++asked;
      using Request = std::decay_t<decltype(seeds[0])>;
      (coordinator.*handler)(static_cast<const Request&>(*request), reply, done);
    };
    ask(&Coordinator::HandleRegisterWorker, workers, new v1::RegisterWorkerResponse);
    ask(&Coordinator::HandleHeartbeat, beats, new v1::HeartbeatResponse);
    ask(&Coordinator::HandleRegisterParameterServer, shard_registrations,
        new v1::RegisterParameterServerResponse);
    ask(&Coordinator::HandlePublishRendezvous, publishes, new v1::PublishRendezvousResponse);
    if (i % 4 == 0) ask(&Coordinator::HandleSubmitJob, submits, new v1::Job);
    if (i % 8 == 0) ask(&Coordinator::HandleDeregister, leaves, new v1::DeregisterResponse);
    if (i % 16 == 0) ask(&Coordinator::HandlePauseJob, controls, new v1::Job);
    if (i % 16 == 8) ask(&Coordinator::HandleResumeJob, controls, new v1::Job);
    if (i % 64 == 63) ask(&Coordinator::HandleStopJob, controls, new v1::Job);
    clock.Advance(absl::Milliseconds(100));
    coordinator.Tick();
    if (i % 32 == 0) coordinator.PollShards();
  }
  // Whatever still waits (a registration waiting for its generation) is answered once
  // its deadline passes.
  clock.Advance(absl::Minutes(10));
  coordinator.Tick();
  EXPECT_LE(answered, asked);
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  // The coordinator still answers and reports a consistent picture.
  const v1::ClusterStatus status = coordinator.GetClusterStatus();
  EXPECT_LE(status.shards_size(), 1);
  std::printf("%d of %d requests answered: %d OK, %d refused with a status\n", answered, asked, ok,
              refused);
}

}  // namespace
}  // namespace tributary::coordinator
