// Finite-difference checks of every layer and every registered model. The checks
// run the CPU executor in double precision (the same template the float replicas
// run), so central differences are accurate to ~1e-9 and the tolerance can be tight;
// the float executor is then compared against the double one.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/row_pieces.h"
#include "proto/job.pb.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/test_util.h"

namespace tributary::engine {
namespace {

using testing::OwnedBatch;
using testing::RandomBatch;

struct Case {
  std::string name;
  ModelDef model;
};

ModelDef Must(absl::StatusOr<ModelDef> model) {
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

std::vector<Case> LayerCases() {
  std::vector<Case> cases;
  {
    ModelBuilder b("linear", Shape{5, 1, 1});
    b.Linear("fc1", 3);
    cases.push_back({"Linear", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("relu", Shape{5, 1, 1});
    b.Linear("fc1", 6).Relu().Linear("fc2", 3);
    cases.push_back({"ReLU", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("tanh", Shape{5, 1, 1});
    b.Linear("fc1", 6).Tanh().Linear("fc2", 3);
    cases.push_back({"Tanh", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("dropout", Shape{5, 1, 1});
    b.Linear("fc1", 8).Relu().Dropout(0.4f).Linear("fc2", 3);
    cases.push_back({"Dropout", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("conv_padded", Shape{2, 5, 5});
    b.Conv2d("conv1", 3, 3, 1, 1).Flatten().Linear("fc1", 3);
    cases.push_back({"Conv2dPadded", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("conv_strided", Shape{1, 7, 6});
    b.Conv2d("conv1", 2, 3, 2, 0).Tanh().Flatten().Linear("fc1", 4);
    cases.push_back({"Conv2dStrided", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("pool", Shape{1, 5, 4});
    b.Conv2d("conv1", 2, 3, 1, 1).MaxPool2d(2).Flatten().Linear("fc1", 3);
    cases.push_back({"MaxPool2dAndFlatten", Must(std::move(b).Build())});
  }
  {
    ModelBuilder b("stack", Shape{1, 6, 6});
    b.Conv2d("conv1", 2, 3, 1, 1).Relu().MaxPool2d(2).Conv2d("conv2", 3, 3, 1, 1).Relu();
    b.Flatten().Linear("fc1", 5).Relu().Dropout(0.3f).Linear("fc2", 3);
    cases.push_back({"ConvStack", Must(std::move(b).Build())});
  }
  return cases;
}

std::vector<Case> ModelCases() {
  std::vector<Case> cases;
  v1::ModelSpec logreg;
  logreg.set_name("logreg");
  for (uint32_t s : {6, 3}) logreg.add_layer_sizes(s);
  cases.push_back({"logreg", Must(BuildModel(logreg))});
  v1::ModelSpec mlp;
  mlp.set_name("mlp");
  for (uint32_t s : {6, 5, 4, 3}) mlp.add_layer_sizes(s);
  mlp.set_dropout(0.25f);
  cases.push_back({"mlp", Must(BuildModel(mlp))});
  v1::ModelSpec cnn;
  cnn.set_name("cnn");
  for (uint32_t s : {5, 3}) cnn.add_layer_sizes(s);
  for (uint32_t s : {2, 3}) cnn.add_conv_channels(s);
  for (uint32_t s : {1, 8, 8}) cnn.add_input_shape(s);
  cnn.set_dropout(0.2f);
  cases.push_back({"cnn", Must(BuildModel(cnn))});
  return cases;
}

// Checks d(loss sum)/d(param) against central differences for every parameter.
void CheckGradients(const Case& c) {
  SCOPED_TRACE(c.name);
  const ModelDef& model = c.model;
  const OwnedBatch batch = RandomBatch(model, 4, 5);
  std::vector<float> init(model.num_parameters);
  InitParameters(model, 11, init.data());
  std::vector<double> params(init.begin(), init.end());
  const DropoutKey key{3, 17};

  CpuExecutor<double> executor(model);
  std::vector<double> grads(model.num_parameters);
  const LossStats stats =
      executor.ForwardBackward(params.data(), batch.View(), &key, grads.data(), nullptr);
  EXPECT_EQ(stats.samples, 4);
  ASSERT_TRUE(std::isfinite(stats.loss_sum));

  auto loss_at = [&](int64_t j, double value) {
    const double saved = params[j];
    params[j] = value;
    std::vector<double> scratch(model.num_parameters);
    const double loss =
        executor.ForwardBackward(params.data(), batch.View(), &key, scratch.data(), nullptr)
            .loss_sum;
    params[j] = saved;
    return loss;
  };
  const double eps = 1e-5;
  int checked = 0;
  double max_error = 0;
  for (int64_t j = 0; j < model.num_parameters; ++j) {
    const double numeric = (loss_at(j, params[j] + eps) - loss_at(j, params[j] - eps)) / (2 * eps);
    const double error = std::abs(numeric - grads[j]);
    max_error = std::max(max_error, error);
    EXPECT_LE(error, 1e-6 + 1e-5 * std::abs(numeric))
        << "parameter " << j << " (" << model.tensors[model.TensorAt(j)].name << "): analytic "
        << grads[j] << ", numeric " << numeric;
    ++checked;
  }
  EXPECT_EQ(checked, model.num_parameters);

  // The float executor (what replicas run) agrees with the double one.
  CpuExecutor<float> float_executor(model);
  std::vector<float> float_grads(model.num_parameters);
  const LossStats float_stats =
      float_executor.ForwardBackward(init.data(), batch.View(), &key, float_grads.data(), nullptr);
  EXPECT_NEAR(float_stats.loss_sum, stats.loss_sum, 1e-5 * std::abs(stats.loss_sum) + 1e-6);
  for (int64_t j = 0; j < model.num_parameters; ++j) {
    EXPECT_NEAR(float_grads[j], grads[j], 1e-5 + 1e-4 * std::abs(grads[j])) << "parameter " << j;
  }
}

TEST(GradientCheckTest, EveryLayer) {
  for (const Case& c : LayerCases()) CheckGradients(c);
}

TEST(GradientCheckTest, EveryModel) {
  for (const Case& c : ModelCases()) CheckGradients(c);
}

TEST(GradientCheckTest, ReadyCallbacksRunLastLayerFirstAndCoverTheBuffer) {
  for (const Case& c : ModelCases()) {
    SCOPED_TRACE(c.name);
    const OwnedBatch batch = RandomBatch(c.model, 3, 1);
    std::vector<float> params(c.model.num_parameters);
    InitParameters(c.model, 1, params.data());
    std::vector<float> grads(c.model.num_parameters);
    std::vector<std::pair<int64_t, int64_t>> calls;
    CpuExecutor<float> executor(c.model);
    const DropoutKey key{1, 0};
    executor.ForwardBackward(params.data(), batch.View(), &key, grads.data(),
                             [&](int tensor, int64_t offset, int64_t length) {
                               EXPECT_EQ(c.model.tensors[tensor].offset, offset);
                               EXPECT_EQ(c.model.tensors[tensor].length, length);
                               calls.emplace_back(offset, length);
                             });
    ASSERT_EQ(calls.size(), c.model.tensors.size());
    int64_t frontier = c.model.num_parameters;
    for (const auto& [offset, length] : calls) {
      EXPECT_EQ(offset + length, frontier);  // Strictly decreasing, no gaps.
      frontier = offset;
    }
    EXPECT_EQ(frontier, 0);
  }
}

// A linear layer large enough for row pieces (row_pieces.h): 64 x 2048 -> 8 pieces of
// 8 rows. Its weight's gradient is reported piece by piece, last first; the forward
// asks for the pieces last first; both give what a plain loop computes, and the
// pieces' arithmetic does not depend on how many threads take them.
TEST(GradientCheckTest, LargeLinearLayersWorkInRowPieces) {
  // 80 samples: 2 * 80 * 64 * 2048 = 21 MFLOP per product, enough for the executor to
  // split the pieces over its threads (kMinParallelFlops) when it has two.
  constexpr int64_t kIn = 2048, kHidden = 64, kClasses = 10, kSamples = 80;
  ModelBuilder b("pieced", Shape{kIn, 1, 1});
  b.Linear("fc1", kHidden).Relu().Linear("fc2", kClasses);
  const ModelDef model = Must(std::move(b).Build());
  ASSERT_EQ(RowPieceCount(kHidden, kIn), 8);
  const LayerSpec& fc1 = model.layers[0];
  const LayerSpec& fc2 = model.layers[2];
  const OwnedBatch batch = RandomBatch(model, kSamples, 4);
  std::vector<float> init(model.num_parameters);
  InitParameters(model, 5, init.data());
  const std::vector<double> params(init.begin(), init.end());

  // The plain computation: h = relu(x W1^T + b1), z = h W2^T + b2, summed cross-entropy.
  std::vector<double> expected(model.num_parameters, 0.0);
  for (int64_t s = 0; s < kSamples; ++s) {
    const float* x = batch.features.data() + s * kIn;
    std::vector<double> h(kHidden), z(kClasses);
    for (int64_t o = 0; o < kHidden; ++o) {
      double sum = params[fc1.bias.offset + o];
      for (int64_t i = 0; i < kIn; ++i) sum += params[fc1.weight.offset + o * kIn + i] * x[i];
      h[o] = sum > 0 ? sum : 0;
    }
    double max = -1e300;
    for (int64_t c = 0; c < kClasses; ++c) {
      double sum = params[fc2.bias.offset + c];
      for (int64_t o = 0; o < kHidden; ++o) sum += params[fc2.weight.offset + c * kHidden + o] * h[o];
      z[c] = sum;
      max = std::max(max, sum);
    }
    double total = 0;
    for (double v : z) total += std::exp(v - max);
    std::vector<double> dz(kClasses), dh(kHidden, 0.0);
    for (int64_t c = 0; c < kClasses; ++c) {
      dz[c] = std::exp(z[c] - max) / total - (c == batch.labels[s] ? 1 : 0);
      expected[fc2.bias.offset + c] += dz[c];
      for (int64_t o = 0; o < kHidden; ++o) {
        expected[fc2.weight.offset + c * kHidden + o] += dz[c] * h[o];
        dh[o] += dz[c] * params[fc2.weight.offset + c * kHidden + o];
      }
    }
    for (int64_t o = 0; o < kHidden; ++o) {
      if (h[o] <= 0) continue;
      expected[fc1.bias.offset + o] += dh[o];
      for (int64_t i = 0; i < kIn; ++i) expected[fc1.weight.offset + o * kIn + i] += dh[o] * x[i];
    }
  }

  std::vector<std::pair<int64_t, int64_t>> ready, needed;
  CpuExecutor<double> executor(model);
  std::vector<double> grads(model.num_parameters);
  executor.ForwardBackward(
      params.data(), batch.View(), nullptr, grads.data(),
      [&](int, int64_t offset, int64_t length) { ready.emplace_back(offset, length); },
      [&](int64_t offset, int64_t length) { needed.emplace_back(offset, length); });
  for (int64_t j = 0; j < model.num_parameters; ++j) {
    ASSERT_NEAR(grads[j], expected[j], 1e-9 + 1e-9 * std::abs(expected[j])) << "parameter " << j;
  }
  // Reported: fc2's bias and weight, fc1's bias, then fc1's weight in 8 pieces of 8 rows,
  // strictly decreasing and without gaps.
  ASSERT_EQ(ready.size(), 3u + 8u);
  int64_t frontier = model.num_parameters;
  for (const auto& [offset, length] : ready) {
    EXPECT_EQ(offset + length, frontier);
    frontier = offset;
  }
  EXPECT_EQ(frontier, 0);
  for (size_t k = 3; k < ready.size(); ++k) EXPECT_EQ(ready[k].second, 8 * kIn) << k;
  // Asked for: fc1's weight pieces last first, fc1's bias, then fc2 (weight and bias).
  ASSERT_EQ(needed.size(), 8u + 1u + 1u);
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(needed[k].first, fc1.weight.offset + (7 - k) * 8 * kIn) << k;
    EXPECT_EQ(needed[k].second, 8 * kIn) << k;
  }
  EXPECT_EQ(needed[8], std::make_pair(fc1.bias.offset, fc1.bias.length));
  EXPECT_EQ(needed[9], std::make_pair(fc2.weight.offset, fc2.weight.length + fc2.bias.length));

  // Two threads take the pieces in turn: the same bits, the same report order.
  const int threads_before = CpuMatmulThreads();
  SetCpuMatmulThreads(2);
  CpuExecutor<float> two(model);
  SetCpuMatmulThreads(1);
  CpuExecutor<float> one(model);
  SetCpuMatmulThreads(threads_before);
  std::vector<float> grads_one(model.num_parameters), grads_two(model.num_parameters);
  std::vector<std::pair<int64_t, int64_t>> ready_two;
  const LossStats loss_one =
      one.ForwardBackward(init.data(), batch.View(), nullptr, grads_one.data(), nullptr);
  const LossStats loss_two = two.ForwardBackward(
      init.data(), batch.View(), nullptr, grads_two.data(),
      [&](int, int64_t offset, int64_t length) { ready_two.emplace_back(offset, length); });
  EXPECT_EQ(loss_one.loss_sum, loss_two.loss_sum);
  for (int64_t j = fc1.weight.offset; j < fc1.weight.offset + fc1.weight.length; ++j) {
    ASSERT_EQ(grads_one[j], grads_two[j]) << "parameter " << j;
  }
  EXPECT_EQ(ready_two, ready);
}

// Large convolutions put a few samples in each matrix product (~4 MiB of columns):
// 5 samples of this layer go in chunks of 3 and 2. Per-sample runs (checked by finite
// differences above at small sizes) must add up to the chunked batch.
TEST(GradientCheckTest, ConvChunksSpanSeveralProducts) {
  ModelBuilder b("wide_conv", Shape{64, 24, 24});
  b.Conv2d("conv1", 2, 3, 1, 1).Relu().Flatten().Linear("fc1", 3);
  const ModelDef model = Must(std::move(b).Build());
  const OwnedBatch batch = RandomBatch(model, 5, 8);
  std::vector<double> params(model.num_parameters);
  {
    std::vector<float> init(model.num_parameters);
    InitParameters(model, 3, init.data());
    params.assign(init.begin(), init.end());
  }
  CpuExecutor<double> executor(model);
  std::vector<double> whole(model.num_parameters), one(model.num_parameters),
      sum(model.num_parameters, 0.0);
  const LossStats whole_stats =
      executor.ForwardBackward(params.data(), batch.View(), nullptr, whole.data(), nullptr);
  double loss = 0;
  for (int64_t s = 0; s < 5; ++s) {
    loss += executor.ForwardBackward(params.data(), batch.View(s, 1), nullptr, one.data(), nullptr)
                .loss_sum;
    for (int64_t j = 0; j < model.num_parameters; ++j) sum[j] += one[j];
  }
  EXPECT_NEAR(whole_stats.loss_sum, loss, 1e-9);
  for (int64_t j = 0; j < model.num_parameters; ++j) {
    ASSERT_NEAR(whole[j], sum[j], 1e-9 + 1e-9 * std::abs(sum[j])) << "parameter " << j;
  }
}

TEST(GradientCheckTest, DropoutChangesWithStepAndIsOffInEvaluation) {
  const ModelDef model = ModelCases()[1].model;  // mlp with dropout
  const OwnedBatch batch = RandomBatch(model, 6, 2);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 1, params.data());
  CpuExecutor<float> executor(model);
  std::vector<float> a(model.num_parameters), b(model.num_parameters), c(model.num_parameters);
  const DropoutKey step0{1, 0}, step1{1, 1};
  const LossStats sa = executor.ForwardBackward(params.data(), batch.View(), &step0, a.data(), {});
  const LossStats sb = executor.ForwardBackward(params.data(), batch.View(), &step0, b.data(), {});
  executor.ForwardBackward(params.data(), batch.View(), &step1, c.data(), {});
  EXPECT_EQ(a, b);
  EXPECT_EQ(sa.loss_sum, sb.loss_sum);
  EXPECT_NE(a, c);
  const LossStats eval = executor.Forward(params.data(), batch.View());
  const LossStats no_dropout =
      executor.ForwardBackward(params.data(), batch.View(), nullptr, c.data(), {});
  EXPECT_EQ(eval.loss_sum, no_dropout.loss_sum);
  EXPECT_NE(eval.loss_sum, sa.loss_sum);
}

}  // namespace
}  // namespace tributary::engine
