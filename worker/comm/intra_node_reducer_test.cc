// The intra-node reducers on real CPU replicas: threads inside one process, and
// Gloo between "processes" played by threads that rendezvous through an in-memory
// store. The leader must end up with the sum of every replica's gradient, the
// others with the leader's parameters, and a missing peer must give an error, not a
// hang.
#include "worker/comm/intra_node_reducer.h"

#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "worker/comm/in_memory_rendezvous.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/replica_factory.h"

namespace tributary::worker {
namespace {

engine::ModelDef SmallMlp() {
  v1::ModelSpec spec;
  spec.set_name("mlp");
  for (uint32_t size : {12, 16, 4}) spec.add_layer_sizes(size);
  absl::StatusOr<engine::ModelDef> model = engine::BuildModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// One "process": R CPU replicas sharing a parameter buffer, each with its own batch.
struct Process {
  Process(const engine::ModelDef& model, int replicas, int seed)
      : params(model.num_parameters) {
    engine::InitParameters(model, 7, params.data());
    std::vector<std::unique_ptr<engine::Replica>> list;
    for (int r = 0; r < replicas; ++r) {
      list.push_back(std::make_unique<engine::CpuReplica>(model, params.data()));
    }
    group = std::make_unique<engine::ReplicaGroup>(std::move(list));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    const int per_replica = 5;
    features.resize(replicas * per_replica * model.input.size());
    for (float& x : features) x = normal(rng);
    for (int i = 0; i < replicas * per_replica; ++i) {
      labels.push_back(i % model.num_classes);
      ids.push_back(seed * 1000 + i);
    }
    EXPECT_TRUE(group
                    ->RunOnAll([&](int r) -> absl::Status {
                      engine::Batch batch;
                      batch.features = features.data() + r * per_replica * model.input.size();
                      batch.labels = labels.data() + r * per_replica;
                      batch.sample_ids = ids.data() + r * per_replica;
                      batch.count = per_replica;
                      return group->replica(r).ForwardBackward(batch, {1, 0}, nullptr).status();
                    })
                    .ok());
  }

  // Sum of this process's replica gradients, in replica order.
  std::vector<float> GradientSum() {
    std::vector<float> sum(params.size(), 0.0f);
    for (int r = 0; r < group->size(); ++r) {
      const float* g = group->replica(r).host_gradients();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    return sum;
  }

  std::vector<float> params;
  std::unique_ptr<engine::ReplicaGroup> group;
  std::vector<float> features;
  std::vector<int32_t> labels;
  std::vector<uint64_t> ids;
};

TEST(ThreadReducerTest, SumsTheReplicasOfTheProcess) {
  const engine::ModelDef model = SmallMlp();
  Process process(model, 3, 1);
  std::unique_ptr<IntraNodeReducer> reducer = MakeThreadReducer(*process.group);
  EXPECT_EQ(reducer->name(), "threads");
  const std::vector<float> expected = process.GradientSum();
  std::vector<float> out(model.num_parameters, -1.0f);
  // Two ranges, last first (the order backward finishes them).
  const int64_t half = model.num_parameters / 2;
  ASSERT_TRUE(reducer->ReduceGradients(half, model.num_parameters - half, out.data() + half).ok());
  ASSERT_TRUE(reducer->ReduceGradients(0, half, out.data()).ok());
  EXPECT_EQ(out, expected);
}

TEST(ThreadReducerTest, OneCpuReplicasSumLiesInItsOwnGradientBuffer) {
  const engine::ModelDef model = SmallMlp();
  Process one(model, 1, 2);
  std::unique_ptr<IntraNodeReducer> reducer = MakeThreadReducer(*one.group);
  const float* gradients = one.group->replica(0).host_gradients();
  EXPECT_EQ(*reducer->ReduceInPlace(0, model.num_parameters), gradients);
  EXPECT_EQ(*reducer->ReduceInPlace(7, 5), gradients + 7);
  // What a push from there sends is what ReduceGradients would have copied.
  std::vector<float> copied(model.num_parameters);
  ASSERT_TRUE(reducer->ReduceGradients(0, model.num_parameters, copied.data()).ok());
  EXPECT_EQ(std::vector<float>(gradients, gradients + model.num_parameters), copied);
  // Several replicas must be summed: nothing lies in place.
  Process three(model, 3, 3);
  EXPECT_EQ(*MakeThreadReducer(*three.group)->ReduceInPlace(0, 5), nullptr);
}

// A replica that keeps its gradients apart from host memory, as a GPU replica does;
// `stages`: whether it can leave them in host memory of its own (StageGradients).
class DeviceLikeReplica : public engine::CpuReplica {
 public:
  DeviceLikeReplica(const engine::ModelDef& model, const float* params, bool stages)
      : CpuReplica(model, params), stages_(stages) {}
  const float* host_gradients() const override { return nullptr; }
  absl::StatusOr<const float*> StageGradients(int64_t offset, int64_t length) override {
    if (!stages_) return absl::UnimplementedError("no staging");
    staging_.resize(model().num_parameters);
    if (absl::Status s = CopyGradients(offset, length, staging_.data() + offset); !s.ok()) {
      return s;
    }
    return staging_.data() + offset;
  }
  const std::vector<float>& staging() const { return staging_; }

 private:
  bool stages_;
  std::vector<float> staging_;
};

TEST(ThreadReducerTest, OneDeviceReplicasSumIsPushedFromItsStagingWhereItHasOne) {
  const engine::ModelDef model = SmallMlp();
  std::vector<float> params(model.num_parameters);
  engine::InitParameters(model, 5, params.data());
  for (const bool stages : {true, false}) {
    std::vector<std::unique_ptr<engine::Replica>> replicas;
    auto owned = std::make_unique<DeviceLikeReplica>(model, params.data(), stages);
    DeviceLikeReplica* replica = owned.get();
    replicas.push_back(std::move(owned));
    engine::ReplicaGroup group(std::move(replicas));
    std::vector<float> features(4 * model.input.size());
    for (size_t i = 0; i < features.size(); ++i) features[i] = 0.01f * static_cast<float>(i % 13);
    const std::vector<int32_t> labels = {0, 1, 2, 3};
    const std::vector<uint64_t> ids = {0, 1, 2, 3};
    engine::Batch batch;
    batch.features = features.data();
    batch.labels = labels.data();
    batch.sample_ids = ids.data();
    batch.count = 4;
    ASSERT_TRUE(replica->ForwardBackward(batch, {1, 0}, nullptr).ok());
    std::unique_ptr<IntraNodeReducer> reducer = MakeThreadReducer(group);
    absl::StatusOr<const float*> staged = reducer->ReduceInPlace(7, 11);
    ASSERT_TRUE(staged.ok()) << staged.status();
    if (!stages) {
      EXPECT_EQ(*staged, nullptr) << "no staging: ReduceGradients copies";
      continue;
    }
    ASSERT_EQ(*staged, replica->staging().data() + 7);
    std::vector<float> copied(11);
    ASSERT_TRUE(reducer->ReduceGradients(7, 11, copied.data()).ok());
    EXPECT_EQ(std::vector<float>(*staged, *staged + 11), copied);
    // A range out of bounds is the replica's error, not a pointer.
    EXPECT_FALSE(reducer->ReduceInPlace(model.num_parameters, 1).ok());
  }
}

TEST(GlooReducerTest, ReducesOntoTheLeaderAndBroadcastsItsParameters) {
  const engine::ModelDef model = SmallMlp();
  const int processes = 3;
  std::vector<std::unique_ptr<Process>> group;
  for (int p = 0; p < processes; ++p) group.push_back(std::make_unique<Process>(model, 2, p + 1));
  std::vector<float> expected(model.num_parameters, 0.0f);
  for (auto& process : group) {
    const std::vector<float> sum = process->GradientSum();
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += sum[i];
  }
  // The leader's parameters are what everyone must hold after the broadcast.
  for (float& x : group[0]->params) x += 0.5f;
  const std::vector<float> leader_params = group[0]->params;

  InMemoryRendezvous rendezvous;
  std::vector<std::vector<float>> outs(processes, std::vector<float>(model.num_parameters));
  std::vector<absl::Status> results(processes);
  std::vector<std::string> names(processes);
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      GroupOptions options;
      options.local_rank = p;
      options.local_world_size = processes;
      options.timeout = absl::Seconds(20);
      auto reducer = MakeGlooReducer(*group[p]->group, rendezvous, options);
      if (!reducer.ok()) {
        results[p] = reducer.status();
        return;
      }
      names[p] = (*reducer)->name();
      const int64_t n = model.num_parameters;
      const int64_t cut = n / 3;
      absl::Status s = (*reducer)->ReduceGradients(cut, n - cut, outs[p].data() + cut);
      if (s.ok()) s = (*reducer)->ReduceGradients(0, cut, outs[p].data());
      if (s.ok()) s = (*reducer)->BroadcastParameters(group[p]->params.data(), 0, n);
      results[p] = s;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int p = 0; p < processes; ++p) {
    ASSERT_TRUE(results[p].ok()) << "process " << p << ": " << results[p];
    EXPECT_EQ(names[p], "gloo");
    EXPECT_EQ(group[p]->params, leader_params) << "process " << p;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(outs[0][i], expected[i], 1e-5f * (1 + std::abs(expected[i]))) << i;
  }
}

TEST(GlooReducerTest, AMissingPeerIsATimeoutNotAHang) {
  const engine::ModelDef model = SmallMlp();
  Process alone(model, 1, 1);
  InMemoryRendezvous rendezvous;
  GroupOptions options;
  options.local_rank = 0;
  options.local_world_size = 2;
  options.timeout = absl::Milliseconds(500);
  auto reducer = MakeGlooReducer(*alone.group, rendezvous, options);
  ASSERT_FALSE(reducer.ok());
  EXPECT_EQ(reducer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(reducer.status().message().find("rendezvous of 2 processes"), std::string::npos)
      << reducer.status();
}

TEST(GlooReducerTest, APeerThatStopsMakesTheCallFail) {
  const engine::ModelDef model = SmallMlp();
  Process first(model, 1, 1), second(model, 1, 2);
  InMemoryRendezvous rendezvous;
  absl::Status leader_result;
  std::unique_ptr<IntraNodeReducer> follower;
  std::thread leader([&] {
    GroupOptions options;
    options.local_world_size = 2;
    options.timeout = absl::Seconds(2);
    auto reducer = MakeGlooReducer(*first.group, rendezvous, options);
    if (!reducer.ok()) {
      leader_result = reducer.status();
      return;
    }
    std::vector<float> out(model.num_parameters);
    // The follower never reduces: the leader must give up after the timeout.
    leader_result = (*reducer)->ReduceGradients(0, model.num_parameters, out.data());
  });
  GroupOptions options;
  options.local_rank = 1;
  options.local_world_size = 2;
  options.timeout = absl::Seconds(2);
  auto reducer = MakeGlooReducer(*second.group, rendezvous, options);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  follower = std::move(*reducer);
  leader.join();
  EXPECT_FALSE(leader_result.ok());
  EXPECT_NE(leader_result.message().find("gloo reduce"), std::string::npos) << leader_result;
}

}  // namespace
}  // namespace tributary::worker

namespace tributary::worker {
namespace {

// One GPU is enough for a clique of one rank: the reduce must hand back the
// replica's own gradient and the broadcast must leave the parameters on the device.
TEST(NcclReducerTest, SingleRankCliqueOnOneGpu) {
  const engine::ModelDef model = SmallMlp();
  std::vector<float> params(model.num_parameters);
  engine::InitParameters(model, 3, params.data());
  if (!engine::BuiltWithCuda()) {
    Process cpu(model, 1, 1);
    InMemoryRendezvous rendezvous;
    auto reducer = MakeNcclReducer(*cpu.group, rendezvous, NcclGroupOptions());
    ASSERT_FALSE(reducer.ok());
    EXPECT_NE(reducer.status().message().find("--config=cuda"), std::string::npos);
    GTEST_SKIP() << "CPU-only build: NCCL needs --config=cuda (the error above was checked)";
  }
  std::string why;
  if (engine::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;

  absl::StatusOr<std::unique_ptr<engine::Replica>> gpu =
      engine::CreateReplica(model, {engine::DeviceSpec::Kind::kGpu, 0}, params.data());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<std::unique_ptr<engine::Replica>> list;
  list.push_back(std::move(*gpu));
  engine::ReplicaGroup group(std::move(list));
  std::vector<float> features(4 * model.input.size(), 0.25f);
  std::vector<int32_t> labels = {0, 1, 2, 3};
  std::vector<uint64_t> ids = {1, 2, 3, 4};
  engine::Batch batch;
  batch.features = features.data();
  batch.labels = labels.data();
  batch.sample_ids = ids.data();
  batch.count = 4;
  ASSERT_TRUE(group.replica(0).ForwardBackward(batch, {1, 0}, nullptr).ok());
  std::vector<float> expected(model.num_parameters);
  ASSERT_TRUE(group.replica(0).CopyGradients(0, model.num_parameters, expected.data()).ok());

  InMemoryRendezvous rendezvous;
  auto reducer = MakeNcclReducer(group, rendezvous, NcclGroupOptions());
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  EXPECT_EQ((*reducer)->name(), "nccl");
  std::vector<float> out(model.num_parameters);
  ASSERT_TRUE((*reducer)->ReduceGradients(0, model.num_parameters, out.data()).ok());
  EXPECT_EQ(out, expected);
  for (float& x : params) x *= 2;
  ASSERT_TRUE((*reducer)->BroadcastParameters(params.data(), 0, model.num_parameters).ok());
}

}  // namespace
}  // namespace tributary::worker
