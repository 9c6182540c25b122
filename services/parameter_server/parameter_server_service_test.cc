// The shard behind real gRPC servers on loopback, talked to through the generated
// client: 3 fake nodes x 2 shards train SYNC SGD and must land on the hand-computed
// full-batch result; a node that drops its stream mid-step and reconnects loses
// nothing; rejections arrive as the statuses the proto names; the control RPCs and
// the coordinator registration work over the wire.
#include "services/parameter_server/parameter_server_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/channel.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/http_server.h"
#include "common/partition_plan.h"
#include "common/service_host.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/parameter_server/coordinator_registration.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using testing::FloatsOf;
using ::testing::HasSubstr;
using testing::InitialValues;
using testing::MakeHeader;
using testing::MakePush;
using testing::MakeSpec;
using testing::Sgd;
using Stream = grpc::ClientReaderWriter<v1::GradientPush, v1::PartitionValues>;

constexpr int64_t kElements = 384;  // Six partitions of 64 floats over two shards.
constexpr uint32_t kNodes = 3;
constexpr uint32_t kShards = 2;
constexpr float kLearningRate = 0.05f;
const uint64_t kSamples[kNodes] = {5, 3, 8};

// One shard process, in-process: core, executor, service, server.
struct ShardServer {
  explicit ShardServer(int64_t max_partition_bytes = 4 << 20, std::string checkpoint_dir = "",
                       const Clock* clock = nullptr,
                       absl::Duration init_timeout = absl::Minutes(5)) {
    ServerOptions server;
    server.name = "parameter_server";
    server.listen_address = "127.0.0.1:0";
    server.http_host = "127.0.0.1";
    server.http_port = 0;
    server.drain_grace = absl::ZeroDuration();
    server.max_receive_bytes = MaxReceiveBytesForPartition(max_partition_bytes);
    host = std::make_unique<ServiceHost>(server);
    ShardOptions options;
    options.max_partition_bytes = max_partition_bytes;
    options.checkpoint_dir = std::move(checkpoint_dir);
    shard = std::make_unique<ParameterShard>(options, host->registry());
    executor = std::make_unique<PartitionExecutor>(2);
    service = std::make_unique<ParameterServerService>(shard.get(), executor.get(), nullptr,
                                                       init_timeout, clock);
    host->AddService(service.get(), v1::ParameterServer::service_full_name());
    EXPECT_TRUE(host->Start().ok());
    host->SetServing(true);
    ChannelOptions channel_options;
    channel = *MakeChannel(absl::StrCat("127.0.0.1:", host->grpc_port()), channel_options);
    stub = v1::ParameterServer::NewStub(channel);
  }
  ~ShardServer() { host->Shutdown(absl::Seconds(2)); }

  std::unique_ptr<ServiceHost> host;
  std::unique_ptr<ParameterShard> shard;
  std::unique_ptr<PartitionExecutor> executor;
  std::unique_ptr<ParameterServerService> service;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
};

absl::StatusOr<v1::InitPartitionsResponse> InitOverWire(v1::ParameterServer::Stub& stub,
                                                        const v1::InitHeader& header,
                                                        const std::vector<float>& initial) {
  grpc::ClientContext context;
  v1::InitPartitionsResponse response;
  auto writer = stub.InitPartitions(&context, &response);
  v1::InitPartitionsRequest request;
  *request.mutable_header() = header;
  writer->Write(request);
  for (v1::PartitionValues& values : InitialValues(header, initial)) {
    *request.mutable_initial() = std::move(values);
    if (!writer->Write(request)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status BeginGenerationOverWire(v1::ParameterServer::Stub& stub, uint64_t generation,
                                     uint32_t nodes, uint64_t resume_step) {
  grpc::ClientContext context;
  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(generation);
  request.set_num_nodes(nodes);
  request.set_resume_step(resume_step);
  v1::BeginGenerationResponse response;
  return FromGrpcStatus(stub.BeginGeneration(&context, request, &response));
}

// Node k's gradient sum for a step: different per node, element and step.
std::vector<float> NodeGradient(uint32_t node, uint64_t step) {
  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    grad[i] = 0.01f * static_cast<float>(((i + 3) * (node + 1) + 7 * step) % 23) - 0.1f;
  }
  return grad;
}

// Full-batch SGD by hand: p -= lr * (sum over nodes of their sums) / (total samples).
std::vector<float> ExpectedAfter(std::vector<float> params, uint64_t steps) {
  const float total = static_cast<float>(kSamples[0] + kSamples[1] + kSamples[2]);
  for (uint64_t step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> grads;
    for (uint32_t node = 0; node < kNodes; ++node) grads.push_back(NodeGradient(node, step));
    for (int64_t i = 0; i < kElements; ++i) {
      const double sum = double{grads[0][i]} + grads[1][i] + grads[2][i];
      params[i] -= kLearningRate * static_cast<float>(sum / total);
    }
  }
  return params;
}

struct Cluster {
  Cluster() {
    spec = MakeSpec(v1::SYNC, Sgd(kLearningRate), kNodes);
    for (int64_t i = 0; i < kElements; ++i) initial.push_back(0.5f - 0.002f * i);
    for (uint32_t k = 0; k < kShards; ++k) {
      shards.push_back(std::make_unique<ShardServer>());
      headers.push_back(MakeHeader(spec, kElements, kShards, k));
    }
  }

  void InitAll() {
    for (uint32_t k = 0; k < kShards; ++k) {
      // Every node leader installs the job; only the first one creates it.
      for (uint32_t node = 0; node < kNodes; ++node) {
        auto init = InitOverWire(*shards[k]->stub, headers[k], initial);
        ASSERT_TRUE(init.ok()) << init.status();
        EXPECT_EQ(init->created(), node == 0);
      }
      ASSERT_TRUE(BeginGenerationOverWire(*shards[k]->stub, 1, kNodes, 0).ok());
    }
  }

  std::vector<uint32_t> Owned(uint32_t shard) const {
    return PartitionsOfShard(headers[shard].plan(), shard);
  }

  v1::JobSpec spec;
  std::vector<float> initial;
  std::vector<std::unique_ptr<ShardServer>> shards;
  std::vector<v1::InitHeader> headers;
};

// A node leader: one PushPull stream per shard, kept across steps.
class FakeNode {
 public:
  FakeNode(Cluster& cluster, uint32_t rank) : cluster_(cluster), rank_(rank) {
    for (uint32_t k = 0; k < kShards; ++k) Open(k);
    params_ = cluster.initial;
  }

  void Open(uint32_t shard) {
    if (contexts_.size() <= shard) {
      contexts_.resize(kShards);
      streams_.resize(kShards);
    }
    contexts_[shard] = std::make_unique<grpc::ClientContext>();
    streams_[shard] = cluster_.shards[shard]->stub->PushPull(contexts_[shard].get());
  }

  bool Push(uint32_t shard, uint64_t step, uint32_t partition) {
    return streams_[shard]->Write(MakePush(cluster_.headers[shard], 1, step, rank_, partition,
                                           NodeGradient(rank_, step), kSamples[rank_]));
  }

  // Reads the new values of every partition of `shard` for step + 1.
  void Receive(uint32_t shard, uint64_t step) {
    size_t wanted = cluster_.Owned(shard).size();
    std::set<uint32_t> got;
    v1::PartitionValues values;
    while (got.size() < wanted && streams_[shard]->Read(&values)) {
      if (values.step() != step + 1) continue;
      got.insert(values.partition_id());
      const v1::Partition& partition =
          cluster_.headers[shard].plan().partitions(values.partition_id());
      const std::vector<float> floats = FloatsOf(values);
      std::copy(floats.begin(), floats.end(), params_.begin() + partition.offset());
    }
    EXPECT_EQ(got.size(), wanted) << "node " << rank_ << " shard " << shard << " step " << step;
  }

  void Step(uint64_t step) {
    for (uint32_t k = 0; k < kShards; ++k) {
      for (uint32_t partition : cluster_.Owned(k)) EXPECT_TRUE(Push(k, step, partition));
    }
    for (uint32_t k = 0; k < kShards; ++k) Receive(k, step);
  }

  void Close() {
    for (uint32_t k = 0; k < kShards; ++k) {
      streams_[k]->WritesDone();
      const grpc::Status status = streams_[k]->Finish();
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  }

  void Cancel(uint32_t shard) {
    contexts_[shard]->TryCancel();
    streams_[shard]->Finish();
  }

  const std::vector<float>& params() const { return params_; }

 private:
  Cluster& cluster_;
  const uint32_t rank_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<float> params_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(ParameterServerServiceTest, ThreeNodesTwoShardsMatchFullBatchSgd) {
  Cluster cluster;
  cluster.InitAll();
  constexpr uint64_t kSteps = 4;
  std::vector<std::unique_ptr<FakeNode>> nodes;
  for (uint32_t rank = 0; rank < kNodes; ++rank) {
    nodes.push_back(std::make_unique<FakeNode>(cluster, rank));
  }
  std::vector<std::thread> threads;
  for (auto& node : nodes) {
    threads.emplace_back([&node] {
      for (uint64_t step = 0; step < kSteps; ++step) node->Step(step);
      node->Close();
    });
  }
  for (std::thread& thread : threads) thread.join();

  const std::vector<float> expected = ExpectedAfter(cluster.initial, kSteps);
  for (auto& node : nodes) ExpectNear(node->params(), expected);
  // Every node holds exactly the same parameters.
  EXPECT_EQ(nodes[0]->params(), nodes[1]->params());
  EXPECT_EQ(nodes[0]->params(), nodes[2]->params());

  for (uint32_t k = 0; k < kShards; ++k) {
    grpc::ClientContext context;
    v1::ShardStatus status;
    ASSERT_TRUE(cluster.shards[k]->stub->GetShardStatus(&context, {}, &status).ok());
    EXPECT_EQ(status.step(), kSteps);
    EXPECT_EQ(status.generation(), 1u);
    EXPECT_EQ(status.partitions_size(), 3);
    EXPECT_EQ(status.pushes_accepted(), kSteps * kNodes * 3);
    EXPECT_EQ(status.bytes_in(), kSteps * kNodes * 3 * 256);
    EXPECT_EQ(status.bytes_out(), kSteps * kNodes * 3 * 256);
    EXPECT_EQ(status.pushes_rejected(), 0u);
    const std::string metrics = RenderMetrics(*cluster.shards[k]->host->registry());
    EXPECT_THAT(metrics, HasSubstr("tributary_ps_pushes_total{result=\"accepted\"} 36"));
    EXPECT_THAT(metrics, HasSubstr("tributary_ps_step 4"));
    // One aggregation-wait series per partition, each with one wait per step.
    for (const v1::PartitionStatus& partition : status.partitions()) {
      EXPECT_THAT(metrics,
                  HasSubstr(absl::StrCat("tributary_ps_aggregation_wait_seconds_count{partition=\"",
                                         partition.partition_id(), "\"} ", kSteps)));
      EXPECT_GE(partition.aggregation_wait_seconds(), 0.0);
    }
  }

  // A joining node pulls the current values.
  std::vector<float> pulled(kElements);
  for (uint32_t k = 0; k < kShards; ++k) {
    grpc::ClientContext context;
    v1::PullRequest request;
    request.set_job_id("job-1");
    auto reader = cluster.shards[k]->stub->Pull(&context, request);
    v1::PartitionValues values;
    int count = 0;
    while (reader->Read(&values)) {
      const v1::Partition& partition = cluster.headers[k].plan().partitions(values.partition_id());
      const std::vector<float> floats = FloatsOf(values);
      std::copy(floats.begin(), floats.end(), pulled.begin() + partition.offset());
      ++count;
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(count, 3);
  }
  EXPECT_EQ(pulled, nodes[0]->params());
}

TEST(ParameterServerServiceTest, ANodeThatDropsItsStreamMidStepLosesNothing) {
  Cluster cluster;
  cluster.InitAll();
  std::vector<std::unique_ptr<FakeNode>> nodes;
  for (uint32_t rank = 0; rank < kNodes; ++rank) {
    nodes.push_back(std::make_unique<FakeNode>(cluster, rank));
  }
  // Step 0 for everyone.
  std::vector<std::thread> threads;
  for (auto& node : nodes) threads.emplace_back([&node] { node->Step(0); });
  for (std::thread& thread : threads) thread.join();
  threads.clear();

  // Step 1: node 0 pushes one partition to shard 0, then its connection drops.
  const std::vector<uint32_t> owned = cluster.Owned(0);
  ASSERT_TRUE(nodes[0]->Push(0, 1, owned[0]));
  // Let the push land before the stream goes away.
  for (int i = 0; i < 200; ++i) {
    if (cluster.shards[0]->shard->Status().partitions(0).waiting_for_size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  nodes[0]->Cancel(0);
  // The others push all of step 1 meanwhile.
  for (uint32_t rank = 1; rank < kNodes; ++rank) {
    threads.emplace_back([&nodes, rank] { nodes[rank]->Step(1); });
  }
  // Node 0 reconnects and sends the whole step again; the partition it had sent is
  // an exact duplicate and is not applied twice.
  nodes[0]->Open(0);
  nodes[0]->Step(1);
  for (std::thread& thread : threads) thread.join();
  for (auto& node : nodes) node->Close();

  const std::vector<float> expected = ExpectedAfter(cluster.initial, 2);
  for (auto& node : nodes) ExpectNear(node->params(), expected);
  v1::ShardStatus status = cluster.shards[0]->shard->Status();
  EXPECT_EQ(status.pushes_duplicate(), 1u);
  EXPECT_EQ(status.updates_applied(), 6u);
}

// Opens a stream, sends one push and returns the status the stream ends with.
grpc::Status PushOnce(v1::ParameterServer::Stub& stub, const v1::GradientPush& push) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub.PushPull(&context);
  stream->Write(push);
  stream->WritesDone();
  v1::PartitionValues values;
  while (stream->Read(&values)) {
  }
  return stream->Finish();
}

TEST(ParameterServerServiceTest, RejectionsEndTheStreamWithTheirStatus) {
  ShardServer server(/*max_partition_bytes=*/256);
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 2), 128, 1, 0);
  const std::vector<float> initial(128, 1.0f);
  ASSERT_TRUE(InitOverWire(*server.stub, header, initial).ok());
  const std::vector<float> grad(128, 1.0f);

  v1::GradientPush push = MakePush(header, 0, 0, 0, 0, grad, 1);
  push.set_partition_id(9);
  grpc::Status status = PushOnce(*server.stub, push);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("partition 9 is not owned"));

  push = MakePush(header, 0, 3, 0, 0, grad, 1);
  status = PushOnce(*server.stub, push);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("is at step 0"));

  push = MakePush(header, 0, 0, 0, 0, grad, 1);
  push.mutable_data()->resize(2 << 20);  // Past the receive limit of a 256-byte shard.
  status = PushOnce(*server.stub, push);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Nothing of the above reached the partition: it still waits for both nodes.
  v1::ShardStatus shard_status = server.shard->Status();
  EXPECT_EQ(shard_status.pushes_rejected(), 2u);
  EXPECT_EQ(shard_status.pushes_accepted(), 0u);
  EXPECT_EQ(shard_status.partitions(0).version(), 0u);
  EXPECT_THAT(shard_status.partitions(0).waiting_for(), ::testing::ElementsAre(0, 1));
}

TEST(ParameterServerServiceTest, AHalfClosedStreamGetsItsValuesBeforeItEnds) {
  ShardServer server;
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 2), 64, 1, 0);
  ASSERT_TRUE(InitOverWire(*server.stub, header, std::vector<float>(64, 0.0f)).ok());
  grpc::ClientContext context;
  auto first = server.stub->PushPull(&context);
  ASSERT_TRUE(first->Write(MakePush(header, 0, 0, 0, 0, std::vector<float>(64, 1.0f), 1)));
  first->WritesDone();  // Done pushing, still waiting for the step's values.
  EXPECT_TRUE(
      PushOnce(*server.stub, MakePush(header, 0, 0, 1, 0, std::vector<float>(64, 3.0f), 1)).ok());
  v1::PartitionValues values;
  ASSERT_TRUE(first->Read(&values));
  EXPECT_EQ(FloatsOf(values), std::vector<float>(64, -2.0f));
  EXPECT_FALSE(first->Read(&values));
  EXPECT_TRUE(first->Finish().ok());
}

// Waits (up to 20 s) for `done`.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

// An InitPartitions whose caller goes away, and one whose caller stops sending but
// keeps the stream open, hold their initial values no longer: the first is freed when
// the call is cancelled, the second when it has been open for the init timeout.
TEST(ParameterServerServiceTest, HalfFinishedInitPartitionsAreFreed) {
  FakeClock clock;
  ShardServer server(4 << 20, "", &clock, absl::Seconds(10));
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 1), 256, 1, 0);
  const std::vector<v1::PartitionValues> initial =
      InitialValues(header, std::vector<float>(256, 0.5f));
  ASSERT_GT(initial.size(), 1u);
  auto buffered = [&] { return server.shard->metrics().init_buffered_bytes.Value(); };
  for (const bool caller_leaves : {true, false}) {
    SCOPED_TRACE(caller_leaves ? "the caller goes away" : "the caller stalls");
    grpc::ClientContext context;
    v1::InitPartitionsResponse response;
    auto writer = server.stub->InitPartitions(&context, &response);
    v1::InitPartitionsRequest request;
    *request.mutable_header() = header;
    ASSERT_TRUE(writer->Write(request));
    *request.mutable_initial() = initial[0];  // One partition of several.
    ASSERT_TRUE(writer->Write(request));
    ASSERT_TRUE(Eventually([&] { return buffered() == 256.0; })) << buffered();
    EXPECT_EQ(server.service->open_inits(), 1u);
    if (caller_leaves) {
      context.TryCancel();
    } else {
      EXPECT_EQ(server.service->ExpireStalledInits(), 0) << "not stalled long enough";
      clock.Advance(absl::Seconds(11));
      EXPECT_EQ(server.service->ExpireStalledInits(), 1);
    }
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(Eventually([&] { return buffered() == 0 && server.service->open_inits() == 0; }))
        << buffered() << " bytes, " << server.service->open_inits() << " streams";
    EXPECT_TRUE(server.shard->Status().job_id().empty()) << "nothing was installed";
  }
  // A whole one installs as ever, and its values are no longer counted as buffered.
  ASSERT_TRUE(InitOverWire(*server.stub, header, std::vector<float>(256, 0.5f)).ok());
  EXPECT_EQ(buffered(), 0);
  EXPECT_EQ(server.shard->Status().job_id(), "job-1");
}

TEST(ParameterServerServiceTest, ControlRpcsOverTheWire) {
  ShardServer server(4 << 20, testing::FreshTempDir("service_control"));
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 1), 64, 1, 0);
  {
    grpc::ClientContext context;
    v1::PullRequest request;
    request.set_job_id("job-1");
    auto reader = server.stub->Pull(&context, request);
    v1::PartitionValues values;
    EXPECT_FALSE(reader->Read(&values));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  // A bad InitPartitions is refused with the shard's message.
  v1::InitHeader bad = header;
  bad.set_shard_index(4);
  auto refused = InitOverWire(*server.stub, bad, std::vector<float>(64, 0.0f));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("shard_index 4 but the plan has 1 shards"));

  ASSERT_TRUE(InitOverWire(*server.stub, header, std::vector<float>(64, 0.0f)).ok());
  EXPECT_TRUE(
      PushOnce(*server.stub, MakePush(header, 0, 0, 0, 0, std::vector<float>(64, 1.0f), 1)).ok());
  {
    grpc::ClientContext context;
    v1::CheckpointResponse response;
    ASSERT_TRUE(server.stub->Checkpoint(&context, {}, &response).ok());
    EXPECT_EQ(response.step(), 1u);
    EXPECT_EQ(response.checksum().size(), 8u);
  }
  {
    grpc::ClientContext context;
    v1::BeginGenerationRequest request;
    request.set_job_id("job-1");
    request.set_generation(0);
    request.set_num_nodes(1);
    v1::BeginGenerationResponse response;
    const grpc::Status status = server.stub->BeginGeneration(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("not newer"));
  }
  {
    grpc::ClientContext context;
    v1::EndJobRequest request;
    request.set_job_id("job-1");
    v1::EndJobResponse response;
    ASSERT_TRUE(server.stub->EndJob(&context, request, &response).ok());
    EXPECT_THAT(response.final_checkpoint(), HasSubstr("step-000000000001"));
  }
  {
    grpc::ClientContext context;
    v1::EndJobRequest request;
    request.set_job_id("job-1");
    v1::EndJobResponse response;
    EXPECT_EQ(server.stub->EndJob(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    // The ended job's final parameters stay readable, and the status says it ended.
    grpc::ClientContext context;
    v1::PullRequest request;
    request.set_job_id("job-1");
    auto reader = server.stub->Pull(&context, request);
    v1::PartitionValues values;
    int pulled = 0;
    while (reader->Read(&values)) ++pulled;
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_GT(pulled, 0);
    grpc::ClientContext status_context;
    v1::ShardStatus status;
    ASSERT_TRUE(
        server.stub->GetShardStatus(&status_context, v1::GetShardStatusRequest(), &status).ok());
    EXPECT_EQ(status.job_id(), "job-1");
    EXPECT_TRUE(status.job_ended());
  }
}

// A coordinator that is "not up yet" for its first answer.
class FakeCoordinator final : public v1::Coordinator::CallbackService {
 public:
  grpc::ServerUnaryReactor* RegisterParameterServer(
      grpc::CallbackServerContext* context, const v1::RegisterParameterServerRequest* request,
      v1::RegisterParameterServerResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    if (requests_.size() == 1) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting up"));
    } else {
      response->set_shard_index(1);
      response->set_expected_shards(2);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  std::vector<v1::RegisterParameterServerRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RegisterParameterServerRequest> requests_;
};

TEST(CoordinatorRegistrationTest, RetriesUntilTheCoordinatorAnswers) {
  FakeCoordinator coordinator;
  ServerOptions options;
  options.name = "coordinator";
  options.listen_address = "127.0.0.1:0";
  options.http_port = -1;
  options.drain_grace = absl::ZeroDuration();
  ServiceHost host(options);
  host.AddService(&coordinator, v1::Coordinator::service_full_name());
  ASSERT_TRUE(host.Start().ok());

  ParameterShard shard(ShardOptions{}, nullptr);
  RegistrationOptions registration;
  registration.coordinator = absl::StrCat("127.0.0.1:", host.grpc_port());
  registration.request.set_address("127.0.0.1:12345");
  registration.request.set_shard_index(-1);
  registration.first_backoff = absl::Milliseconds(10);
  CoordinatorRegistration registrar(registration,
                                    [&shard](const v1::RegisterParameterServerResponse& r) {
                                      ASSERT_TRUE(shard.set_shard_index(r.shard_index()).ok());
                                    });
  ASSERT_TRUE(registrar.WaitRegistered(absl::Seconds(20)));
  EXPECT_EQ(registrar.attempts(), 2);
  EXPECT_EQ(shard.shard_index(), 1);
  ASSERT_EQ(coordinator.requests().size(), 2u);
  EXPECT_EQ(coordinator.requests()[1].address(), "127.0.0.1:12345");
  EXPECT_EQ(coordinator.requests()[1].shard_index(), -1);
  host.Shutdown(absl::Seconds(1));
}

}  // namespace
}  // namespace tributary::ps
