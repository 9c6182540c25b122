#include "worker/engine/trainer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace tributary::engine {
namespace {

TEST(TrainerTest, LossFallsOnAFashionMnistSubset) {
  if (!FindIdxFile(kDefaultIdxDirectory, "train-images-idx3-ubyte").ok()) {
    GTEST_SKIP() << "Fashion-MNIST not installed in " << kDefaultIdxDirectory;
  }
  v1::JobSpec spec;
  spec.mutable_model()->set_name("mlp");
  for (uint32_t s : {784, 64, 10}) spec.mutable_model()->add_layer_sizes(s);
  spec.mutable_dataset()->set_train_limit(2000);
  spec.mutable_dataset()->set_test_limit(500);
  spec.set_global_batch_size(50);
  spec.set_max_steps(80);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.002f);
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer = LocalTrainer::Create(spec, {});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<LossStats> before = (*trainer)->Evaluate();
  ASSERT_TRUE(before.ok()) << before.status();
  LossStats first, last;
  while (!(*trainer)->done()) {
    absl::StatusOr<StepResult> step = (*trainer)->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(step->stats.samples, 50);
    if (step->step < 10) first += step->stats;
    if (step->step >= 70) last += step->stats;
  }
  EXPECT_EQ((*trainer)->step(), 80u);
  EXPECT_LT(last.mean_loss(), 0.6 * first.mean_loss());
  absl::StatusOr<LossStats> after = (*trainer)->Evaluate();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->samples, 500);
  EXPECT_LT(after->mean_loss(), 0.6 * before->mean_loss());
  EXPECT_GT(after->accuracy(), 0.6);
  EXPECT_EQ((*trainer)->Step().status().code(), absl::StatusCode::kFailedPrecondition);
}

v1::JobSpec SyntheticSpec() {
  v1::JobSpec spec;
  spec.mutable_model()->set_name("mlp");
  for (uint32_t s : {16, 12, 4}) spec.mutable_model()->add_layer_sizes(s);
  spec.mutable_model()->set_dropout(0.25f);
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_samples(100);
  spec.mutable_dataset()->set_synthetic_test_samples(40);
  spec.mutable_dataset()->set_synthetic_features(16);
  spec.mutable_dataset()->set_synthetic_classes(4);
  spec.set_global_batch_size(23);  // 5 steps per epoch, the last one of 8 samples.
  spec.set_epochs(2);
  spec.mutable_optimizer()->set_type(v1::MOMENTUM);
  spec.set_seed(21);
  return spec;
}

TEST(TrainerTest, ReplicasGiveTheSameParametersAsOne) {
  std::vector<float> reference;
  for (uint32_t replicas : {1u, 3u, 4u}) {
    TrainerOptions options;
    options.replicas = replicas;
    absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer =
        LocalTrainer::Create(SyntheticSpec(), options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    EXPECT_EQ((*trainer)->total_steps(), 10u);
    while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
    const std::vector<float>& params = (*trainer)->parameters();
    if (reference.empty()) {
      reference = params;
      continue;
    }
    ASSERT_EQ(params.size(), reference.size());
    for (size_t j = 0; j < params.size(); ++j) {
      ASSERT_NEAR(params[j], reference[j], 1e-5 + 1e-5 * std::abs(reference[j]))
          << replicas << " replicas, element " << j;
    }
  }
}

// The same job trained twice in one process, the second time with every heap address
// shifted: the parameters agree bit for bit (the executor's buffers are aligned, so no
// reduction's order depends on where a buffer lies: aligned.h). An MLP and a CNN.
TEST(TrainerTest, TheSameJobGivesTheSameBitsWhereverItsBuffersLie) {
  v1::JobSpec cnn = SyntheticSpec();
  cnn.mutable_model()->set_name("cnn");
  cnn.mutable_model()->clear_layer_sizes();
  cnn.mutable_model()->add_layer_sizes(12);
  cnn.mutable_model()->add_layer_sizes(4);
  for (int extent : {1, 4, 4}) cnn.mutable_model()->add_input_shape(extent);
  for (int channels : {3, 5}) cnn.mutable_model()->add_conv_channels(channels);
  v1::JobSpec mlp = SyntheticSpec();
  mlp.mutable_model()->clear_layer_sizes();
  for (uint32_t size : {16, 72, 40, 4}) mlp.mutable_model()->add_layer_sizes(size);
  for (const v1::JobSpec& spec : {mlp, cnn}) {
    SCOPED_TRACE(spec.model().name());
    std::vector<std::vector<float>> results;
    std::vector<std::unique_ptr<char[]>> shifts;
    for (int run = 0; run < 3; ++run) {
      shifts.emplace_back(new char[8 + 24 * run]);  // Moves later allocations.
      absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer = LocalTrainer::Create(spec, {});
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
      results.push_back((*trainer)->parameters());
    }
    for (int run = 1; run < 3; ++run) {
      ASSERT_EQ(results[run].size(), results[0].size());
      EXPECT_EQ(std::memcmp(results[run].data(), results[0].data(),
                            results[0].size() * sizeof(float)),
                0)
          << "run " << run << " differs from run 0";
    }
  }
}

TEST(TrainerTest, OneStepIsTheOptimizerOnTheMeanGradient) {
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer = LocalTrainer::Create(SyntheticSpec(), {});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const std::vector<float> before = (*trainer)->parameters();
  absl::StatusOr<StepResult> step = (*trainer)->Step();
  ASSERT_TRUE(step.ok());
  // MOMENTUM with zero velocity: p1 = p0 - lr * g.
  const float lr = (*trainer)->spec().optimizer().learning_rate();
  const std::vector<float>& mean = (*trainer)->last_mean_gradient();
  for (size_t j = 0; j < before.size(); ++j) {
    EXPECT_FLOAT_EQ((*trainer)->parameters()[j], before[j] - lr * mean[j]);
  }
}

TEST(TrainerTest, EvaluateParametersMatchesTheTrainer) {
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer = LocalTrainer::Create(SyntheticSpec(), {});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*trainer)->Step().ok());
  absl::StatusOr<LossStats> expected = (*trainer)->Evaluate();
  absl::StatusOr<LossStats> actual = EvaluateParameters(
      (*trainer)->model(), (*trainer)->parameters().data(), (*trainer)->data().test, 7);
  ASSERT_TRUE(expected.ok() && actual.ok()) << actual.status();
  EXPECT_EQ(actual->samples, 40);
  EXPECT_EQ(actual->correct, expected->correct);
  EXPECT_NEAR(actual->loss_sum, expected->loss_sum, 1e-4);
}

TEST(TrainerTest, BadSpecsAreRejectedWithTheField) {
  v1::JobSpec spec = SyntheticSpec();
  spec.mutable_model()->set_dropout(1.5f);
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer = LocalTrainer::Create(spec, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("model.dropout"), std::string::npos);

  spec = SyntheticSpec();
  spec.mutable_model()->set_layer_sizes(0, 15);
  trainer = LocalTrainer::Create(spec, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("takes 15 inputs"), std::string::npos)
      << trainer.status();

  TrainerOptions options;
  options.replicas = 0;
  EXPECT_FALSE(LocalTrainer::Create(SyntheticSpec(), options).ok());
}

}  // namespace
}  // namespace tributary::engine
