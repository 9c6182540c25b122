// GPU replicas against the CPU reference (skipped, with the reason, where no CUDA
// device is visible or the build has no --config=cuda). Tolerance: per element
// |gpu - cpu| <= 1e-4 * |cpu| + 1e-5 * max|cpu|; loss sums within 1e-5 relative.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/batch_split.h"
#include "common/optimizer.h"
#include "common/shared_region.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/replica_factory.h"
#include "worker/engine/test_util.h"

namespace tributary::engine {
namespace {

using testing::OwnedBatch;
using testing::RandomBatch;

std::vector<ModelDef> Models() {
  std::vector<ModelDef> models;
  v1::ModelSpec logreg;
  logreg.set_name("logreg");
  for (uint32_t s : {20, 4}) logreg.add_layer_sizes(s);
  models.push_back(*BuildModel(logreg));
  v1::ModelSpec mlp;
  mlp.set_name("mlp");
  for (uint32_t s : {30, 40, 20, 5}) mlp.add_layer_sizes(s);
  mlp.set_dropout(0.3f);
  models.push_back(*BuildModel(mlp));
  v1::ModelSpec cnn;
  cnn.set_name("cnn");
  for (uint32_t s : {16, 10}) cnn.add_layer_sizes(s);
  for (uint32_t s : {4, 8}) cnn.add_conv_channels(s);
  for (uint32_t s : {1, 12, 12}) cnn.add_input_shape(s);
  cnn.set_dropout(0.5f);
  models.push_back(*BuildModel(cnn));
  ModelBuilder tanh("tanh_strided", Shape{2, 9, 7});
  tanh.Conv2d("conv1", 3, 3, 2, 0).Tanh().Flatten().Linear("fc1", 3);
  models.push_back(*std::move(tanh).Build());
  return models;
}

class GpuReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// `model` on GPU 0, from `params` (initialized here, seed 4).
absl::StatusOr<std::unique_ptr<Replica>> ReplicaOnGpu(const ModelDef& model,
                                                   std::vector<float>& params) {
  params.assign(model.num_parameters, 0.0f);
  InitParameters(model, 4, params.data());
  return CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  float max = 0;
  for (float g : cpu) max = std::max(max, std::abs(g));
  for (size_t j = 0; j < cpu.size(); ++j) {
    ASSERT_NEAR(gpu[j], cpu[j], 1e-4 * std::abs(cpu[j]) + 1e-5 * max) << "element " << j;
  }
}

TEST_F(GpuReplicaTest, MatchesTheCpuForEveryModel) {
  for (const ModelDef& model : Models()) {
    SCOPED_TRACE(model.name);
    const OwnedBatch batch = RandomBatch(model, 37, 3);
    std::vector<float> params(model.num_parameters);
    InitParameters(model, 4, params.data());
    CpuReplica cpu(model, params.data());
    absl::StatusOr<std::unique_ptr<Replica>> gpu =
        CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const DropoutKey key{4, 12};
    absl::StatusOr<LossStats> cpu_stats = cpu.ForwardBackward(batch.View(), key, nullptr);
    std::vector<std::pair<int64_t, int64_t>> calls;
    absl::StatusOr<LossStats> gpu_stats = (*gpu)->ForwardBackward(
        batch.View(), key,
        [&](int, int64_t offset, int64_t length) { calls.emplace_back(offset, length); });
    ASSERT_TRUE(cpu_stats.ok() && gpu_stats.ok()) << gpu_stats.status();
    EXPECT_NEAR(gpu_stats->loss_sum, cpu_stats->loss_sum, 1e-5 * std::abs(cpu_stats->loss_sum));
    EXPECT_EQ(gpu_stats->correct, cpu_stats->correct);
    std::vector<float> gpu_grads(model.num_parameters);
    ASSERT_TRUE((*gpu)->CopyGradients(0, model.num_parameters, gpu_grads.data()).ok());
    ExpectClose(gpu_grads, std::vector<float>(cpu.host_gradients(),
                                              cpu.host_gradients() + model.num_parameters));
    int64_t frontier = model.num_parameters;
    for (const auto& [offset, length] : calls) {
      EXPECT_EQ(offset + length, frontier);
      frontier = offset;
    }
    EXPECT_EQ(frontier, 0);

    absl::StatusOr<LossStats> cpu_eval = cpu.Evaluate(batch.View());
    absl::StatusOr<LossStats> gpu_eval = (*gpu)->Evaluate(batch.View());
    ASSERT_TRUE(gpu_eval.ok()) << gpu_eval.status();
    EXPECT_NEAR(gpu_eval->loss_sum, cpu_eval->loss_sum, 1e-5 * std::abs(cpu_eval->loss_sum));
  }
}

// LOCAL_SGD's inner step on the device (one fused kernel, issue 25) against the
// host optimizer on the same gradients, for every optimizer kind, three steps in a
// row (state carried on the device), in two ranges.
TEST_F(GpuReplicaTest, TheInnerUpdateOnTheDeviceMatchesTheHostOptimizer) {
  const ModelDef model = Models()[1];
  const OwnedBatch batch = RandomBatch(model, 16, 5);
  for (v1::OptimizerType type : {v1::SGD, v1::MOMENTUM, v1::ADAM, v1::ADAMW}) {
    SCOPED_TRACE(v1::OptimizerType_Name(type));
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_learning_rate(0.01f);
    spec.set_weight_decay(0.001f);
    spec.set_momentum(0.9f);
    spec.set_beta1(0.9f);
    spec.set_beta2(0.999f);
    spec.set_epsilon(1e-8f);
    spec.mutable_schedule()->set_kind(v1::CONSTANT);
    absl::StatusOr<Optimizer> optimizer = Optimizer::Create(spec, 10);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    const int slots = optimizer->state_slots();
    std::vector<float> params(model.num_parameters);
    InitParameters(model, 4, params.data());
    absl::StatusOr<std::unique_ptr<Replica>> gpu =
        CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE((*gpu)->AppliesInnerUpdate());
    std::vector<float> state(static_cast<size_t>(slots) * model.num_parameters, 0.0f);
    std::vector<float> grads(model.num_parameters);
    const int64_t half = model.num_parameters / 2;
    for (uint64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE((*gpu)->ForwardBackward(batch.View(), {1, step}, nullptr).ok());
      ASSERT_TRUE((*gpu)->CopyGradients(0, model.num_parameters, grads.data()).ok());
      const UpdateCoefficients c = optimizer->Coefficients(step);
      for (const auto& [offset, length] :
           {std::pair<int64_t, int64_t>{half, model.num_parameters - half}, {0, half}}) {
        optimizer->ApplyMean(step, params.data() + offset, params.data() + offset,
                             grads.data() + offset, 16.0f, state.data() + offset * slots,
                             static_cast<size_t>(length));
        ASSERT_TRUE((*gpu)->InnerUpdate(c, slots, offset, length, 16.0f).ok());
      }
    }
    std::vector<float> on_device(model.num_parameters);
    ASSERT_TRUE((*gpu)->CopyParameters(0, model.num_parameters, on_device.data()).ok());
    ExpectClose(on_device, params);
  }
}

// The worker pushes a GPU replica's gradients from its pinned staging (issue 25): the
// staged range holds CopyGradients' bits, in two ranges last first as the worker asks,
// and stays there through a parameter download (which has its own staging) until the
// next pass's download.
TEST_F(GpuReplicaTest, StagedGradientsAreCopyGradientsBitsAndOutliveAParameterDownload) {
  const ModelDef model = Models()[1];
  const OwnedBatch batch = RandomBatch(model, 16, 6);
  std::vector<float> params;
  absl::StatusOr<std::unique_ptr<Replica>> gpu = ReplicaOnGpu(model, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE((*gpu)->DoneWithParametersWhenReady());
  ASSERT_TRUE((*gpu)->ForwardBackward(batch.View(), {1, 0}, nullptr).ok());
  const int64_t n = model.num_parameters;
  const int64_t half = n / 2;
  absl::StatusOr<const float*> high = (*gpu)->StageGradients(half, n - half);
  absl::StatusOr<const float*> low = (*gpu)->StageGradients(0, half);
  ASSERT_TRUE(high.ok() && low.ok()) << high.status() << " " << low.status();
  EXPECT_EQ(*high, *low + half);  // One buffer, in the worker's layout.
  std::vector<float> copied(n);
  ASSERT_TRUE((*gpu)->CopyGradients(0, n, copied.data()).ok());
  std::vector<float> downloaded(n);
  ASSERT_TRUE((*gpu)->CopyParameters(0, n, downloaded.data()).ok());
  EXPECT_EQ(std::memcmp(*low, copied.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(downloaded.data(), params.data(), n * sizeof(float)), 0);
  EXPECT_FALSE((*gpu)->StageGradients(n, 1).ok());
  EXPECT_FALSE((*gpu)->StageGradients(-1, 2).ok());
}

// The worker's node region (a memfd it shares with the local PS shards): given as the
// gradient buffer, the replica page-locks it and stages its downloads for pushes there
// (CopyGradients keeps its own staging), the same bits; a second buffer is refused.
TEST_F(GpuReplicaTest, StagesGradientsIntoAGivenSharedBuffer) {
  const ModelDef model = Models()[1];
  const OwnedBatch batch = RandomBatch(model, 16, 6);
  const int64_t n = model.num_parameters;
  std::vector<float> params;
  absl::StatusOr<std::unique_ptr<Replica>> gpu = ReplicaOnGpu(model, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(n * sizeof(float));
  ASSERT_TRUE(region.ok()) << region.status();
  float* given = reinterpret_cast<float*>(region->data());
  if (!(*gpu)->UseGradientBuffer(given)) GTEST_SKIP() << "the driver refused to page-lock it";
  EXPECT_FALSE((*gpu)->UseGradientBuffer(given)) << "one buffer per replica";
  ASSERT_TRUE((*gpu)->ForwardBackward(batch.View(), {1, 0}, nullptr).ok());
  const int64_t half = n / 2;
  absl::StatusOr<const float*> high = (*gpu)->StageGradients(half, n - half);
  absl::StatusOr<const float*> low = (*gpu)->StageGradients(0, half);
  ASSERT_TRUE(high.ok() && low.ok()) << high.status() << " " << low.status();
  EXPECT_EQ(*low, given);
  EXPECT_EQ(*high, given + half);
  std::vector<float> copied(n);
  ASSERT_TRUE((*gpu)->CopyGradients(0, n, copied.data()).ok());
  EXPECT_EQ(std::memcmp(given, copied.data(), n * sizeof(float)), 0);
}

// Updates go up straight from page-locked host memory (the worker's parameter buffer),
// and SetParameters returns once the copy is enqueued: the buffer may change after a
// later download returned (the copy stream runs in order). Where the driver refuses to
// page-lock, the replica stages, as from any other memory.
TEST_F(GpuReplicaTest, UploadsFromPageLockedMemoryWithoutStagingOrWaiting) {
  const ModelDef model = Models()[1];
  const int64_t n = model.num_parameters;
  std::vector<float> params;
  absl::StatusOr<std::unique_ptr<Replica>> gpu = ReplicaOnGpu(model, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = 0.001f * static_cast<float>(i % 101);
  absl::StatusOr<std::unique_ptr<PinnedHostMemory>> pinned =
      PinHostMemory(host.data(), host.size() * sizeof(float));
  if (!pinned.ok()) GTEST_SKIP() << "the driver refused to page-lock: " << pinned.status();
  const std::vector<float> sent = host;
  const int64_t half = n / 2;
  ASSERT_TRUE((*gpu)->SetParameters(host.data(), half, n - half).ok());
  ASSERT_TRUE((*gpu)->SetParameters(host.data(), 0, half).ok());
  std::vector<float> on_device(n);
  ASSERT_TRUE((*gpu)->CopyParameters(0, n, on_device.data()).ok());
  EXPECT_EQ(std::memcmp(on_device.data(), sent.data(), n * sizeof(float)), 0);
  std::fill(host.begin(), host.end(), -1.0f);  // After a download: must not reach the device.
  // The pass computes on what went up: the CPU replica over the same values agrees.
  const OwnedBatch batch = RandomBatch(model, 16, 7);
  std::vector<float> cpu_params = sent;
  CpuReplica cpu(model, cpu_params.data());
  absl::StatusOr<LossStats> cpu_stats = cpu.ForwardBackward(batch.View(), {1, 0}, nullptr);
  absl::StatusOr<LossStats> gpu_stats = (*gpu)->ForwardBackward(batch.View(), {1, 0}, nullptr);
  ASSERT_TRUE(cpu_stats.ok() && gpu_stats.ok()) << gpu_stats.status();
  EXPECT_NEAR(gpu_stats->loss_sum, cpu_stats->loss_sum, 1e-5 * std::abs(cpu_stats->loss_sum));
  // Unlocked again: the staging path, the same bits.
  pinned->reset();
  ASSERT_TRUE((*gpu)->SetParameters(sent.data(), 0, n).ok());
  ASSERT_TRUE((*gpu)->CopyParameters(0, n, on_device.data()).ok());
  EXPECT_EQ(std::memcmp(on_device.data(), sent.data(), n * sizeof(float)), 0);
}

// Downloads started ahead (PrefetchGradients) are what StageGradients of the same
// ranges returns in the same pass; one the pass did not take is never taken by the
// next pass, whose gradients differ.
TEST_F(GpuReplicaTest, PrefetchedDownloadsAreStagedInTheirPassOnly) {
  const ModelDef model = Models()[1];
  const int64_t n = model.num_parameters;
  std::vector<float> params;
  absl::StatusOr<std::unique_ptr<Replica>> gpu = ReplicaOnGpu(model, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t half = n / 2;
  std::vector<float> copied(n);
  for (const uint64_t seed : {3, 4}) {
    SCOPED_TRACE(seed);
    const OwnedBatch batch = RandomBatch(model, 16, seed);
    ASSERT_TRUE((*gpu)->ForwardBackward(batch.View(), {1, seed}, nullptr).ok());
    ASSERT_TRUE((*gpu)->PrefetchGradients(half, n - half).ok());
    ASSERT_TRUE((*gpu)->PrefetchGradients(0, half).ok());
    ASSERT_TRUE((*gpu)->PrefetchGradients(0, half).ok()) << "a second start is a no-op";
    absl::StatusOr<const float*> high = (*gpu)->StageGradients(half, n - half);
    absl::StatusOr<const float*> low = (*gpu)->StageGradients(0, half);
    ASSERT_TRUE(high.ok() && low.ok()) << high.status() << " " << low.status();
    ASSERT_TRUE((*gpu)->CopyGradients(0, n, copied.data()).ok());
    EXPECT_EQ(std::memcmp(*low, copied.data(), half * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(*high, copied.data() + half, (n - half) * sizeof(float)), 0);
  }
  // Started, never staged: the next pass downloads its own gradients.
  ASSERT_TRUE((*gpu)->PrefetchGradients(0, n).ok());
  const OwnedBatch other = RandomBatch(model, 16, 9);
  ASSERT_TRUE((*gpu)->ForwardBackward(other.View(), {1, 9}, nullptr).ok());
  absl::StatusOr<const float*> staged = (*gpu)->StageGradients(0, n);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE((*gpu)->CopyGradients(0, n, copied.data()).ok());
  EXPECT_EQ(std::memcmp(*staged, copied.data(), n * sizeof(float)), 0);
  EXPECT_FALSE((*gpu)->PrefetchGradients(0, n + 1).ok()) << "out of range";
}

TEST_F(GpuReplicaTest, SplitAcrossGpuReplicasEqualsWholeBatch) {
  const ModelDef model = Models()[2];
  const OwnedBatch batch = RandomBatch(model, 11, 8);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 6, params.data());
  const DropoutKey key{6, 1};
  absl::StatusOr<std::unique_ptr<Replica>> whole =
      CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->ForwardBackward(batch.View(), key, nullptr).ok());
  std::vector<float> expected(model.num_parameters), sum(model.num_parameters, 0),
      part(model.num_parameters);
  ASSERT_TRUE((*whole)->CopyGradients(0, model.num_parameters, expected.data()).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    const SampleRange range = PartsRange(11, 3, r, 1);
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
    ASSERT_TRUE(replica.ok());
    ASSERT_TRUE(
        (*replica)->ForwardBackward(batch.View(range.offset, range.count), key, nullptr).ok());
    ASSERT_TRUE((*replica)->CopyGradients(0, model.num_parameters, part.data()).ok());
    for (int64_t j = 0; j < model.num_parameters; ++j) sum[j] += part[j];
  }
  ExpectClose(sum, expected);
}

TEST(GpuAvailabilityTest, CpuOnlyBuildsSayWhyThereIsNoGpu) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  v1::ModelSpec spec;
  spec.set_name("logreg");
  for (uint32_t s : {4, 2}) spec.add_layer_sizes(s);
  const ModelDef model = *BuildModel(spec);
  std::vector<float> params(model.num_parameters);
  absl::StatusOr<std::unique_ptr<Replica>> gpu =
      CreateReplica(model, {DeviceSpec::Kind::kGpu, 0}, params.data());
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("cuda:0"), std::string::npos) << gpu.status();
  // Nothing to page-lock host memory for: the session stages, and says why.
  absl::StatusOr<std::unique_ptr<PinnedHostMemory>> pinned =
      PinHostMemory(params.data(), params.size() * sizeof(float));
  ASSERT_FALSE(pinned.ok());
  EXPECT_TRUE(absl::IsUnavailable(pinned.status())) << pinned.status();
}

}  // namespace
}  // namespace tributary::engine
