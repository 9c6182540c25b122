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
#include "common/sha256.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/model_store.h"

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
  absl::StatusOr<v1::RestoreJobResponse> RestoreJob(const v1::ShardInfo&,
                                                    const v1::RestoreJobRequest&) override {
    return absl::NotFoundError("no checkpoint");
  }
};

// A small stand-in for a TorchScript archive: what the upload checks (a zip's magic
// number and data.pkl and version entries), not a loadable model.
std::string ModelFileBytes() {
  return std::string("PK\x03\x04", 4) + "model/data.pkl" + std::string(8, '\0') + "model/version";
}

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
  v1::StepReport* ran = beat.add_steps();
  ran->set_step(12);
  ran->set_loss(0.5f);
  ran->set_samples(64);
  ran->set_step_seconds(0.01);
  v1::EvaluationReport* evaluated = beat.add_evaluations();
  evaluated->set_step(12);
  evaluated->set_test_accuracy(0.8f);
  beat.set_bytes_pushed(4096);
  WriteSeed(dir, "heartbeat", "with_steps", beat);
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
  v1::WaitRendezvousRequest wait;
  wait.set_rendezvous_id("job-1-0000/g1/node-a");
  wait.add_keys("nccl_id");
  wait.add_keys("gloo");
  wait.set_timeout_ms(500);
  WriteSeed(dir, "wait_rendezvous", "two_keys", wait);
  v1::GetJobRequest get;
  get.set_job_id("job-1-0000");
  WriteSeed(dir, "get_job", "by_id", get);
  v1::GetJobHistoryRequest history;
  history.set_job_id("job-1-0000");
  WriteSeed(dir, "get_job_history", "by_id", history);
  v1::ListJobsRequest list;
  WriteSeed(dir, "list_jobs", "all", list);
  v1::ListWorkersRequest workers;
  WriteSeed(dir, "list_workers", "all", workers);
  v1::GetClusterStatusRequest cluster;
  WriteSeed(dir, "get_cluster_status", "all", cluster);
  // UploadModel streams: the header, then the file's bytes (one chunk here).
  const std::string file = ModelFileBytes();
  v1::UploadModelRequest header;
  header.mutable_header()->set_file_name("model.pt");
  header.mutable_header()->set_size_bytes(file.size());
  header.mutable_header()->set_sha256(Sha256Hex(file));
  WriteSeed(dir, "upload_model_header", "model", header);
  v1::UploadModelRequest chunk;
  chunk.set_chunk(file);
  WriteSeed(dir, "upload_model_chunk", "whole_file", chunk);
  v1::FetchModelRequest fetch;
  fetch.set_sha256(Sha256Hex(file));
  WriteSeed(dir, "fetch_model", "stored", fetch);
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
  const auto waits = Seeds<v1::WaitRendezvousRequest>("wait_rendezvous");
  const auto gets = Seeds<v1::GetJobRequest>("get_job");
  const auto histories = Seeds<v1::GetJobHistoryRequest>("get_job_history");
  const auto lists = Seeds<v1::ListJobsRequest>("list_jobs");
  const auto list_workers = Seeds<v1::ListWorkersRequest>("list_workers");
  const auto cluster_statuses = Seeds<v1::GetClusterStatusRequest>("get_cluster_status");
  ASSERT_FALSE(workers.empty() || beats.empty() || leaves.empty() || shard_registrations.empty() ||
               publishes.empty() || submits.empty() || controls.empty() || waits.empty() ||
               gets.empty() || histories.empty() || lists.empty() || list_workers.empty() ||
               cluster_statuses.empty());

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
    ask(&Coordinator::HandleGetJob, gets, new v1::Job);
    if (i % 4 == 0) ask(&Coordinator::HandleGetJobHistory, histories, new v1::JobHistory);
    if (i % 4 == 1) ask(&Coordinator::HandleListJobs, lists, new v1::ListJobsResponse);
    if (i % 4 == 2) ask(&Coordinator::HandleListWorkers, list_workers, new v1::ListWorkersResponse);
    if (i % 4 == 3) {
      ask(&Coordinator::HandleGetClusterStatus, cluster_statuses, new v1::ClusterStatus);
    }
    {
      // WaitRendezvous answers when its keys exist or its (bounded) wait ends; some
      // waits are cancelled as a client that goes away does.
      auto request = mutator.Mutate(waits[i % waits.size()]);
      auto* reply = new v1::WaitRendezvousResponse;
      replies.emplace_back(reply);
      ++asked;
      const uint64_t wait_id = coordinator.HandleWaitRendezvous(
          static_cast<const v1::WaitRendezvousRequest&>(*request), reply, done);
      if (i % 3 == 0 && wait_id != 0 && coordinator.CancelWaitRendezvous(wait_id)) --asked;
    }
    clock.Advance(absl::Milliseconds(100));
    coordinator.Tick();
    if (i % 32 == 0) coordinator.PollShards();
  }
  // Whatever still waits (a registration waiting for its generation, a rendezvous
  // wait) is answered once its deadline passes.
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

// UploadModel and FetchModel against the model store: mutated headers, chunks and
// digests. Every upload ends with a status (stored only when size, digest and archive
// hold), nothing is stored twice or past the limits, and a fetch of anything but a
// stored digest is refused; the file stored first still reads back intact.
TEST(RequestFuzzTest, UploadAndFetchModelAnswerEveryRequestWithAStatus) {
  const auto headers = Seeds<v1::UploadModelRequest>("upload_model_header");
  const auto chunks = Seeds<v1::UploadModelRequest>("upload_model_chunk");
  const auto fetches = Seeds<v1::FetchModelRequest>("fetch_model");
  ASSERT_FALSE(headers.empty() || chunks.empty() || fetches.empty());
  ModelStoreOptions options;
  options.directory = std::string(std::getenv("TEST_TMPDIR")) + "/models";
  options.max_model_bytes = 1 << 20;
  options.max_stored_bytes = 4 << 20;
  ModelStore store(options);
  ASSERT_TRUE(store.Open().ok());
  const std::string file = ModelFileBytes();
  {
    auto upload = store.StartUpload();
    ASSERT_TRUE(upload.ok()) << upload.status();
    ASSERT_TRUE((*upload)->Header(headers[0].header()).ok());
    ASSERT_TRUE((*upload)->Chunk(chunks[0].chunk()).ok());
    auto stored = (*upload)->Finish();
    ASSERT_TRUE(stored.ok()) << stored.status();
  }
  ProtoMutator mutator(20261126);
  int stored = 0, refused = 0, fetched = 0;
  const int iterations = FuzzIterations(2000);
  for (int i = 0; i < iterations; ++i) {
    auto upload = store.StartUpload();
    ASSERT_TRUE(upload.ok()) << upload.status();
    auto header = mutator.Mutate(headers[i % headers.size()]);
    const auto& request = static_cast<const v1::UploadModelRequest&>(*header);
    absl::Status status = request.has_header()
                              ? (*upload)->Header(request.header())
                              : absl::InvalidArgumentError("the first message is no header");
    for (int k = 0; status.ok() && k < 1 + i % 3; ++k) {
      auto chunk = mutator.Mutate(chunks[(i + k) % chunks.size()]);
      status = (*upload)->Chunk(static_cast<const v1::UploadModelRequest&>(*chunk).chunk());
    }
    if (status.ok()) {
      absl::StatusOr<v1::UploadModelResponse> finished = (*upload)->Finish();
      if (finished.ok() && !finished->already_stored()) ++stored;
      if (!finished.ok()) ++refused;
    } else {
      ++refused;
    }
    auto fetch = mutator.Mutate(fetches[i % fetches.size()]);
    const std::string& digest = static_cast<const v1::FetchModelRequest&>(*fetch).sha256();
    absl::StatusOr<std::shared_ptr<const std::string>> read = store.Read(digest);
    if (read.ok()) {
      ++fetched;
      EXPECT_EQ(Sha256Hex(**read), digest) << "a fetch returned another file's bytes";
    }
  }
  EXPECT_GT(refused, 0);
  absl::StatusOr<std::shared_ptr<const std::string>> first = store.Read(Sha256Hex(file));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(**first, file);
  std::printf("%d uploads stored, %d refused; %d fetches answered with a file\n", stored, refused,
              fetched);
}

}  // namespace
}  // namespace tributary::coordinator
