// The exactness the whole system rests on: the gradients of a batch split across R
// replicas (uneven parts, dropout on), summed, equal the gradient of the whole batch.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "common/batch_split.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/replica_group.h"
#include "worker/engine/test_util.h"

namespace tributary::engine {
namespace {

using testing::OwnedBatch;
using testing::RandomBatch;

ModelDef Mlp(float dropout) {
  v1::ModelSpec spec;
  spec.set_name("mlp");
  for (uint32_t s : {12, 16, 8, 5}) spec.add_layer_sizes(s);
  spec.set_dropout(dropout);
  return *BuildModel(spec);
}

ModelDef Cnn(float dropout) {
  v1::ModelSpec spec;
  spec.set_name("cnn");
  for (uint32_t s : {6, 4}) spec.add_layer_sizes(s);
  for (uint32_t s : {3, 4}) spec.add_conv_channels(s);
  for (uint32_t s : {1, 8, 8}) spec.add_input_shape(s);
  spec.set_dropout(dropout);
  return *BuildModel(spec);
}

void ExpectClose(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t j = 0; j < actual.size(); ++j) {
    ASSERT_NEAR(actual[j], expected[j], 1e-5 + 1e-5 * std::abs(expected[j])) << "element " << j;
  }
}

void CheckSplit(const ModelDef& model, int64_t batch_size, uint32_t replicas) {
  SCOPED_TRACE(model.name + " batch " + std::to_string(batch_size) + " over " +
               std::to_string(replicas));
  const OwnedBatch batch = RandomBatch(model, batch_size, 4);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 9, params.data());
  const DropoutKey key{9, 3};

  CpuReplica whole(model, params.data());
  absl::StatusOr<LossStats> whole_stats = whole.ForwardBackward(batch.View(), key, nullptr);
  ASSERT_TRUE(whole_stats.ok()) << whole_stats.status();
  std::vector<float> expected(whole.host_gradients(),
                              whole.host_gradients() + model.num_parameters);

  std::vector<float> sum(model.num_parameters, 0.0f);
  LossStats split_stats;
  std::vector<uint64_t> sizes;
  for (uint32_t r = 0; r < replicas; ++r) {
    const SampleRange part = PartsRange(batch_size, replicas, r, 1);
    sizes.push_back(part.count);
    CpuReplica replica(model, params.data());  // All share the one parameter buffer.
    absl::StatusOr<LossStats> stats =
        replica.ForwardBackward(batch.View(part.offset, part.count), key, nullptr);
    ASSERT_TRUE(stats.ok()) << stats.status();
    split_stats += *stats;
    for (int64_t j = 0; j < model.num_parameters; ++j) sum[j] += replica.host_gradients()[j];
  }
  EXPECT_EQ(split_stats.samples, batch_size);
  EXPECT_EQ(split_stats.correct, whole_stats->correct);
  EXPECT_NEAR(split_stats.loss_sum, whole_stats->loss_sum, 1e-4);
  ExpectClose(sum, expected);
}

TEST(ReplicaSplitTest, UnevenSplitWithDropoutEqualsWholeBatch) {
  CheckSplit(Mlp(0.3f), 10, 3);  // 4 + 3 + 3
  CheckSplit(Mlp(0.3f), 7, 4);   // 2 + 2 + 2 + 1
  CheckSplit(Mlp(0.3f), 2, 3);   // 1 + 1 + 0: an empty replica contributes zeros
  CheckSplit(Cnn(0.5f), 9, 2);   // 5 + 4
}

TEST(ReplicaSplitTest, DropoutIsActiveInTheCheckedModel) {
  // Guards the test above: without dropout the gradient must differ.
  const ModelDef with = Mlp(0.3f);
  const ModelDef without = Mlp(0.0f);
  ASSERT_EQ(with.num_parameters, without.num_parameters);
  const OwnedBatch batch = RandomBatch(with, 6, 4);
  std::vector<float> params(with.num_parameters);
  InitParameters(with, 9, params.data());
  CpuReplica a(with, params.data()), b(without, params.data());
  ASSERT_TRUE(a.ForwardBackward(batch.View(), {9, 3}, nullptr).ok());
  ASSERT_TRUE(b.ForwardBackward(batch.View(), {9, 3}, nullptr).ok());
  std::vector<float> ga(a.host_gradients(), a.host_gradients() + with.num_parameters);
  std::vector<float> gb(b.host_gradients(), b.host_gradients() + with.num_parameters);
  EXPECT_NE(ga, gb);
}

TEST(ReplicaSplitTest, GroupSumEqualsOneReplica) {
  const ModelDef model = Mlp(0.2f);
  Dataset data = MakeSynthetic(5, 0, 50, 12, 5);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 2, params.data());
  std::vector<uint64_t> samples = {3, 17, 4, 42, 8, 0, 23, 11, 9, 30, 31};

  auto run = [&](int replicas, std::vector<float>& sum) {
    std::vector<std::unique_ptr<Replica>> list;
    for (int i = 0; i < replicas; ++i)
      list.push_back(std::make_unique<CpuReplica>(model, params.data()));
    ReplicaGroup group(std::move(list));
    sum.assign(model.num_parameters, 0.0f);
    absl::StatusOr<LossStats> stats = group.ComputeGradientSum(data, samples, {2, 5}, sum.data());
    EXPECT_TRUE(stats.ok()) << stats.status();
    // Twice: a group is reused step after step.
    stats = group.ComputeGradientSum(data, samples, {2, 5}, sum.data());
    EXPECT_TRUE(stats.ok()) << stats.status();
    return *stats;
  };
  std::vector<float> one, three;
  const LossStats a = run(1, one);
  const LossStats b = run(3, three);
  EXPECT_EQ(a.samples, 11);
  EXPECT_EQ(b.samples, 11);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-4);
  ExpectClose(three, one);
}

// The CNN with dropout, a batch of 5, its parameters (seed 4) and a CPU replica that ran
// the pass on them (key {4, 2}): what the variants below must give.
struct CnnPass {
  CnnPass() : model(Cnn(0.5f)), batch(RandomBatch(model, 5, 3)), params(model.num_parameters) {
    InitParameters(model, 4, params.data());
    reference = std::make_unique<CpuReplica>(model, params.data());
    ran = reference->ForwardBackward(batch.View(), {4, 2}, nullptr).status();
  }
  const ModelDef model;
  const OwnedBatch batch;
  std::vector<float> params;
  std::unique_ptr<CpuReplica> reference;
  absl::Status ran;
};

// A worker can start the forward pass before every partition of the new parameters
// has arrived: the hook runs before each layer first reads its range.
TEST(ReplicaSplitTest, ParametersNeededHookRunsBeforeEachLayerReadsItsRange) {
  const CnnPass pass;
  ASSERT_TRUE(pass.ran.ok()) << pass.ran;
  const ModelDef& model = pass.model;
  const OwnedBatch& batch = pass.batch;
  const std::vector<float>& params = pass.params;
  const CpuReplica& reference = *pass.reference;

  std::vector<float> arriving(model.num_parameters, std::nanf(""));
  CpuReplica replica(model, arriving.data());
  std::vector<std::pair<int64_t, int64_t>> requests;
  replica.set_parameters_needed([&](int64_t offset, int64_t length) {
    requests.emplace_back(offset, length);
    std::copy(params.begin() + offset, params.begin() + offset + length, arriving.begin() + offset);
  });
  absl::StatusOr<LossStats> stats = replica.ForwardBackward(batch.View(), {4, 2}, nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  int64_t covered = 0;
  for (const auto& [offset, length] : requests) {
    EXPECT_EQ(offset, covered);  // Increasing, weight and bias of one layer together.
    covered = offset + length;
  }
  EXPECT_EQ(covered, model.num_parameters);
  EXPECT_EQ(requests.size(), 4u);  // conv1, conv2, fc1, fc2
  for (int64_t j = 0; j < model.num_parameters; ++j) {
    ASSERT_EQ(replica.host_gradients()[j], reference.host_gradients()[j]) << "element " << j;
  }
}

// A gradient buffer given to the replica (the worker's, in memory shared with the PS
// shards): backward writes the same gradients there, CopyGradients and host_gradients
// read them from there, and the buffer's other memory is left alone.
TEST(ReplicaSplitTest, AGivenGradientBufferHoldsTheSameGradients) {
  CnnPass pass;
  ASSERT_TRUE(pass.ran.ok()) << pass.ran;
  const ModelDef& model = pass.model;
  const OwnedBatch& batch = pass.batch;
  std::vector<float>& params = pass.params;
  const CpuReplica& reference = *pass.reference;

  const size_t n = static_cast<size_t>(model.num_parameters);
  std::vector<float> given(n + 2, -7.0f);  // One guard element either side.
  CpuReplica replica(model, params.data());
  ASSERT_TRUE(replica.UseGradientBuffer(given.data() + 1));
  EXPECT_EQ(replica.host_gradients(), given.data() + 1);
  EXPECT_EQ(given[1], 0.0f) << "the replica's zeros moved there";
  ASSERT_TRUE(replica.ForwardBackward(batch.View(), {4, 2}, nullptr).ok());
  EXPECT_EQ(std::vector<float>(given.begin() + 1, given.end() - 1),
            std::vector<float>(reference.host_gradients(), reference.host_gradients() + n));
  EXPECT_EQ(given.front(), -7.0f);
  EXPECT_EQ(given.back(), -7.0f);
  std::vector<float> copied(n);
  ASSERT_TRUE(replica.CopyGradients(0, model.num_parameters, copied.data()).ok());
  EXPECT_EQ(copied, std::vector<float>(given.begin() + 1, given.end() - 1));
  EXPECT_FALSE(replica.UseGradientBuffer(nullptr));
}

TEST(ReplicaSplitTest, BadBatchesAreRejected) {
  const ModelDef model = Mlp(0);
  std::vector<float> params(model.num_parameters);
  CpuReplica replica(model, params.data());
  OwnedBatch batch = RandomBatch(model, 3, 1);
  batch.labels[1] = 5;
  absl::StatusOr<LossStats> stats = replica.ForwardBackward(batch.View(), {}, nullptr);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("label 5"), std::string::npos) << stats.status();
  std::vector<float> other(model.num_parameters);
  EXPECT_FALSE(replica.SetParameters(other.data(), 0, model.num_parameters).ok());
  EXPECT_TRUE(replica.SetParameters(params.data(), 0, model.num_parameters).ok());
  EXPECT_FALSE(replica.CopyGradients(1, model.num_parameters, other.data()).ok());
}

}  // namespace
}  // namespace tributary::engine
