// The TorchScript engine against the native one and against its contract, on the
// small modules in testdata/ (made by testdata/make_torchscript_models.py).
#include "worker/engine/torchscript.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/sha256.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/test_util.h"
#include "worker/engine/trainer.h"

namespace tributary::engine {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const std::string> File(const std::string& name) {
  absl::StatusOr<std::shared_ptr<const std::string>> bytes =
      ReadModelFile("worker/engine/testdata/" + name, kDefaultMaxModelBytes);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::make_shared<const std::string>();
}

// 3 classes, 8 features: what the test modules take.
Dataset Data(uint64_t samples = 64) { return MakeSynthetic(5, 0, samples, 8, 3); }

ModelDef Fitted(const std::string& name, const Dataset& data) {
  absl::StatusOr<ModelDef> model = LoadTorchScriptModel(File(name), name, &data);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : ModelDef();
}

testing::OwnedBatch BatchOf(const Dataset& data, int64_t first, int64_t count) {
  testing::OwnedBatch batch;
  for (int64_t i = first; i < first + count; ++i) batch.ids.push_back(static_cast<uint64_t>(i));
  batch.features.resize(count * data.feature_size());
  batch.labels.resize(count);
  data.Gather(batch.ids.data(), count, batch.features.data(), batch.labels.data());
  return batch;
}

struct Report {
  int tensor;
  int64_t offset;
  int64_t length;
};

TEST(TorchScriptTest, BuiltWithLibTorch) {
  ASSERT_TRUE(BuiltWithTorch()) << "scripts/setup installs libtorch-dev; this build lacks it";
  EXPECT_THAT(TorchDescription(), HasSubstr("LibTorch 1.13"));
}

TEST(TorchScriptTest, DescribesParametersInDeclarationOrder) {
  absl::StatusOr<ModelDef> model = LoadTorchScriptModel(File("tiny_mlp.pt"), "tiny_mlp.pt");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->tensors.size(), 4u);
  EXPECT_EQ(model->tensors[0].name, "fc1.weight");
  EXPECT_EQ(model->tensors[0].shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(model->tensors[1].name, "fc1.bias");
  EXPECT_EQ(model->tensors[1].offset, 128);
  EXPECT_EQ(model->tensors[3].name, "fc2.bias");
  EXPECT_EQ(model->num_parameters, 16 * 8 + 16 + 3 * 16 + 3);
  EXPECT_EQ(model->num_trained, model->num_parameters);
  ASSERT_NE(model->initial_values, nullptr);
  EXPECT_EQ(static_cast<int64_t>(model->initial_values->size()), model->num_parameters);
  // The file's own initialisation (nn.Linear's), not zeros.
  double magnitude = 0;
  for (float v : *model->initial_values) magnitude += std::fabs(v);
  EXPECT_GT(magnitude, 1.0);
  // InitParameters hands out the file's values whatever the seed.
  std::vector<float> a(model->num_parameters), b(model->num_parameters);
  InitParameters(*model, 1, a.data());
  InitParameters(*model, 99, b.data());
  EXPECT_EQ(a, *model->initial_values);
  EXPECT_EQ(a, b);
}

// The same MLP in both engines, from the same flat parameters: the same loss,
// accuracy and gradients, reported in decreasing offset order.
TEST(TorchScriptTest, MatchesTheNativeEngineOnTheSameMlp) {
  const Dataset data = Data();
  const ModelDef torch_model = Fitted("native_mlp.pt", data);
  v1::ModelSpec spec;
  spec.set_name("mlp");
  for (uint32_t size : {8, 16, 3}) spec.add_layer_sizes(size);
  absl::StatusOr<ModelDef> native_model = BuildModel(spec);
  ASSERT_TRUE(native_model.ok());
  ASSERT_EQ(native_model->num_parameters, torch_model.num_parameters);
  for (size_t i = 0; i < torch_model.tensors.size(); ++i) {
    EXPECT_EQ(native_model->tensors[i].name, torch_model.tensors[i].name);
    EXPECT_EQ(native_model->tensors[i].offset, torch_model.tensors[i].offset);
  }
  std::vector<float> params(torch_model.num_parameters);
  InitParameters(*native_model, 3, params.data());
  CpuReplica native(*native_model, params.data());
  absl::StatusOr<std::unique_ptr<Replica>> torch =
      CreateTorchScriptReplica(torch_model, params.data());
  ASSERT_TRUE(torch.ok()) << torch.status();
  const testing::OwnedBatch batch = BatchOf(data, 0, 37);
  std::vector<Report> reports;
  absl::StatusOr<LossStats> a = native.ForwardBackward(batch.View(), {1, 0}, nullptr);
  absl::StatusOr<LossStats> b = (*torch)->ForwardBackward(
      batch.View(), {1, 0}, [&](int tensor, int64_t offset, int64_t length) {
        reports.push_back({tensor, offset, length});
      });
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_NEAR(a->loss_sum, b->loss_sum, 1e-4 * std::fabs(a->loss_sum));
  EXPECT_EQ(a->correct, b->correct);
  EXPECT_EQ(b->samples, 37);
  for (int64_t j = 0; j < torch_model.num_parameters; ++j) {
    const float x = native.host_gradients()[j], y = (*torch)->host_gradients()[j];
    ASSERT_NEAR(x, y, 1e-4f * (1 + std::fabs(x))) << "element " << j;
  }
  ASSERT_EQ(reports.size(), 4u);
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].tensor, 3 - static_cast<int>(i));
    EXPECT_EQ(reports[i].offset, torch_model.tensors[3 - i].offset);
    EXPECT_EQ(reports[i].length, torch_model.tensors[3 - i].length);
  }
  // A second pass overwrites the gradients instead of adding to them.
  ASSERT_TRUE((*torch)->ForwardBackward(batch.View(), {1, 1}, nullptr).ok());
  EXPECT_NEAR(native.host_gradients()[5], (*torch)->host_gradients()[5],
              1e-4f * (1 + std::fabs(native.host_gradients()[5])));
  // The parameters are read in place: a change shows in the next pass without a copy.
  params[0] += 1.0f;
  absl::StatusOr<LossStats> moved_native = native.Evaluate(batch.View());
  absl::StatusOr<LossStats> moved_torch = (*torch)->Evaluate(batch.View());
  ASSERT_TRUE(moved_native.ok() && moved_torch.ok());
  EXPECT_NEAR(moved_native->loss_sum, moved_torch->loss_sum, 1e-4 * moved_native->loss_sum);
  EXPECT_NE(moved_torch->loss_sum, b->loss_sum);
}

TEST(TorchScriptTest, BuffersFollowTheSourceReplicaAndAreReportedFirst) {
  const Dataset data = Data();
  const ModelDef model = Fitted("tiny_bn.pt", data);
  std::vector<std::string> names;
  for (const TensorInfo& t : model.tensors) names.push_back(t.name + (t.buffer ? "*" : ""));
  EXPECT_THAT(names,
              ::testing::ElementsAre("fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight",
                                     "fc2.bias", "bn.running_mean*", "bn.running_var*",
                                     "bn.num_batches_tracked*", "scale*"));
  const TensorInfo& mean = model.tensors[6];
  const TensorInfo& var = model.tensors[7];
  const TensorInfo& tracked = model.tensors[8];
  const TensorInfo& scale = model.tensors[9];
  EXPECT_EQ(model.num_trained, mean.offset);
  EXPECT_EQ(model.num_parameters, scale.offset + 3);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 1, params.data());
  EXPECT_EQ(params[var.offset], 1.0f);  // BatchNorm's initial running variance.
  EXPECT_EQ(params[tracked.offset], 0.0f);
  EXPECT_EQ(params[scale.offset], 2.0f);

  auto source = CreateTorchScriptReplica(model, params.data());
  auto other = CreateTorchScriptReplica(model, params.data());
  ASSERT_TRUE(source.ok() && other.ok());
  (*source)->set_buffer_source(true);
  const testing::OwnedBatch batch = BatchOf(data, 0, 16);
  std::vector<Report> reports;
  ASSERT_TRUE((*source)
                  ->ForwardBackward(batch.View(), {1, 0},
                                    [&](int tensor, int64_t offset, int64_t length) {
                                      reports.push_back({tensor, offset, length});
                                    })
                  .ok());
  // Every tensor once, highest offset first: buffers before any parameter.
  ASSERT_EQ(reports.size(), model.tensors.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].tensor, static_cast<int>(model.tensors.size() - 1 - i));
  }
  const float* g = (*source)->host_gradients();
  EXPECT_EQ(g[tracked.offset], 1.0f);  // One training pass counted.
  EXPECT_NE(g[mean.offset], 0.0f);     // Moved towards the batch mean.
  EXPECT_NE(g[var.offset], 1.0f);
  EXPECT_EQ(g[scale.offset], 2.0f);  // Frozen: carried as it is.
  // The shared buffer is untouched: the next pass starts again from it.
  EXPECT_EQ(params[tracked.offset], 0.0f);
  ASSERT_TRUE((*source)->ForwardBackward(batch.View(), {1, 1}, nullptr).ok());
  EXPECT_EQ((*source)->host_gradients()[tracked.offset], 1.0f);

  ASSERT_TRUE((*other)->ForwardBackward(batch.View(), {1, 0}, nullptr).ok());
  for (int64_t j = model.num_trained; j < model.num_parameters; ++j) {
    EXPECT_EQ((*other)->host_gradients()[j], 0.0f) << j;
  }
  // Parameters got real gradients in both.
  double norm = 0;
  for (int64_t j = 0; j < model.num_trained; ++j) norm += std::fabs((*other)->host_gradients()[j]);
  EXPECT_GT(norm, 0);

  // Evaluation (eval mode) reads the running statistics from the shared buffer.
  absl::StatusOr<LossStats> before = (*other)->Evaluate(batch.View());
  for (int64_t j = 0; j < var.length; ++j) params[var.offset + j] = 100.0f;
  absl::StatusOr<LossStats> after = (*other)->Evaluate(batch.View());
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_NE(before->loss_sum, after->loss_sum);
}

TEST(TorchScriptTest, AnEmptyBatchGivesZeroGradientsAndReportsEverything) {
  const Dataset data = Data();
  const ModelDef model = Fitted("tiny_bn.pt", data);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 1, params.data());
  auto replica = CreateTorchScriptReplica(model, params.data());
  ASSERT_TRUE(replica.ok());
  (*replica)->set_buffer_source(true);
  const testing::OwnedBatch batch = BatchOf(data, 0, 4);
  ASSERT_TRUE((*replica)->ForwardBackward(batch.View(), {1, 0}, nullptr).ok());
  int reported = 0;
  absl::StatusOr<LossStats> empty = (*replica)->ForwardBackward(
      batch.View(0, 0), {1, 1}, [&](int, int64_t, int64_t) { ++reported; });
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->samples, 0);
  EXPECT_EQ(reported, static_cast<int>(model.tensors.size()));
  for (int64_t j = 0; j < model.num_trained; ++j) EXPECT_EQ((*replica)->host_gradients()[j], 0);
  // The source still hands on its (unchanged) buffers.
  EXPECT_EQ((*replica)->host_gradients()[model.num_parameters - 1], 2.0f);
}

TEST(TorchScriptTest, TakesImagesOfAnyShapeFromTheData) {
  Dataset images = MakeSynthetic(5, 0, 32, 36, 3);
  images.sample_shape = Shape{1, 6, 6};
  const ModelDef model = Fitted("tiny_cnn.pt", images);
  EXPECT_EQ(model.torchscript->sample_dims, (std::vector<int64_t>{1, 6, 6}));
  EXPECT_EQ(model.num_classes, 3);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 1, params.data());
  auto replica = CreateTorchScriptReplica(model, params.data());
  ASSERT_TRUE(replica.ok());
  const testing::OwnedBatch batch = BatchOf(images, 0, 8);
  absl::StatusOr<LossStats> stats = (*replica)->ForwardBackward(batch.View(), {1, 0}, nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->loss_sum, 0);
}

TEST(TorchScriptTest, RefusesBadModelsNamingTheFileAndTheProblem) {
  const Dataset data = Data();
  auto load_error = [](const std::string& name) {
    absl::StatusOr<ModelDef> model = LoadTorchScriptModel(File(name), name);
    return model.ok() ? std::string("loaded") : std::string(model.status().message());
  };
  auto fit_error = [&](const std::string& name, const Dataset& d) {
    absl::StatusOr<ModelDef> model = LoadTorchScriptModel(File(name), name, &d);
    return model.ok() ? std::string("fitted") : std::string(model.status().message());
  };
  EXPECT_THAT(load_error("no_parameters.pt"),
              HasSubstr("model file no_parameters.pt: the module has no trainable parameter"));
  EXPECT_THAT(load_error("float64.pt"),
              HasSubstr("model file float64.pt: parameter fc.weight is Double"));
  absl::StatusOr<ModelDef> garbage = LoadTorchScriptModel(
      std::make_shared<const std::string>("certainly not a zip archive"), "garbage.pt");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(),
              HasSubstr("model file garbage.pt: not a TorchScript module"));
  EXPECT_THAT(fit_error("wrong_shape.pt", data),
              HasSubstr("model file wrong_shape.pt: forward returns a Float [4, 3, 1] tensor "
                        "for an input of Float [4, 8]"));
  EXPECT_THAT(fit_error("two_classes.pt", data),
              HasSubstr("forward returns 2 class scores per sample but dataset"));
  EXPECT_THAT(fit_error("returns_nan.pt", data), HasSubstr("returns non-finite values"));
  const Dataset five = MakeSynthetic(5, 0, 16, 5, 3);
  EXPECT_THAT(fit_error("tiny_mlp.pt", five),
              HasSubstr("model file tiny_mlp.pt: forward fails on an input of Float [4, 5]: "
                        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x5 and 8x16) "
                        "(File \""));
  EXPECT_THAT(ReadModelFile("worker/engine/testdata/missing.pt", 100).status().message(),
              HasSubstr("model file worker/engine/testdata/missing.pt: cannot read it"));
  EXPECT_THAT(ReadModelFile("worker/engine/testdata/tiny_mlp.pt", 100).status().message(),
              HasSubstr("bytes, more than the limit of 100"));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TorchScriptTest, ExportWritesTheValuesBackIntoTheModule) {
  const Dataset data = Data();
  const ModelDef model = Fitted("tiny_bn.pt", data);
  std::vector<float> values(model.num_parameters);
  for (int64_t j = 0; j < model.num_parameters; ++j)
    values[j] = 0.001f * static_cast<float>(j % 97);
  values[model.tensors[8].offset] = 123.0f;  // num_batches_tracked, an int64 buffer.
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/exported.pt";
  ASSERT_TRUE(ExportTorchScript(model, values.data(), path).ok());
  absl::StatusOr<ModelDef> back =
      LoadTorchScriptModel(std::make_shared<const std::string>(ReadAll(path)), "exported.pt");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back->initial_values, values);
  EXPECT_EQ(back->num_trained, model.num_trained);
  EXPECT_FALSE(ExportTorchScript(model, values.data(), "/nonexistent-dir/x.pt").ok());
}

TEST(TorchScriptTest, NativeModelsExportToAnEquivalentModule) {
  const Dataset data = Data();
  for (const std::string name : {"mlp", "cnn"}) {
    v1::ModelSpec spec;
    spec.set_name(name);
    Dataset d = data;
    if (name == "mlp") {
      for (uint32_t size : {8, 16, 3}) spec.add_layer_sizes(size);
    } else {
      d = MakeSynthetic(5, 0, 32, 64, 3);
      d.sample_shape = Shape{1, 8, 8};
      for (uint32_t size : {12, 3}) spec.add_layer_sizes(size);
      for (uint32_t size : {4, 6}) spec.add_conv_channels(size);
      for (uint32_t size : {1, 8, 8}) spec.add_input_shape(size);
    }
    absl::StatusOr<ModelDef> native = BuildModel(spec);
    ASSERT_TRUE(native.ok()) << native.status();
    std::vector<float> params(native->num_parameters);
    InitParameters(*native, 11, params.data());
    const std::string path = std::string(getenv("TEST_TMPDIR")) + "/" + name + ".pt";
    absl::Status exported = ExportTorchScript(*native, params.data(), path);
    ASSERT_TRUE(exported.ok()) << exported;
    absl::StatusOr<ModelDef> back =
        LoadTorchScriptModel(std::make_shared<const std::string>(ReadAll(path)), name + ".pt", &d);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back->initial_values, params);
    absl::StatusOr<LossStats> a = EvaluateParameters(*native, params.data(), d);
    absl::StatusOr<LossStats> b = EvaluateParameters(*back, params.data(), d);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_NEAR(a->loss_sum, b->loss_sum, 1e-4 * a->loss_sum) << name;
    EXPECT_EQ(a->correct, b->correct) << name;
  }
}

// The single-process trainer splits each batch over R replicas: with a model free of
// buffers and dropout the parameters do not depend on R (float summation aside).
TEST(TorchScriptTest, TrainerGivesTheSameParametersWhateverTheReplicas) {
  v1::JobSpec spec;
  spec.mutable_model()->set_name(kTorchScriptModel);
  std::shared_ptr<const std::string> bytes = File("tiny_mlp.pt");
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*bytes));
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_features(8);
  spec.mutable_dataset()->set_synthetic_classes(3);
  spec.mutable_dataset()->set_synthetic_train_samples(300);
  spec.set_global_batch_size(50);
  spec.set_max_steps(30);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.02f);
  std::vector<std::vector<float>> results;
  for (uint32_t replicas : {1u, 3u}) {
    TrainerOptions options;
    options.replicas = replicas;
    options.torchscript_bytes = bytes;
    auto trainer = LocalTrainer::Create(spec, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
    results.push_back((*trainer)->parameters());
    absl::StatusOr<LossStats> test = (*trainer)->Evaluate();
    ASSERT_TRUE(test.ok());
    EXPECT_GT(test->accuracy(), 0.5);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t j = 0; j < results[0].size(); ++j) {
    ASSERT_NEAR(results[0][j], results[1][j], 1e-4f * (1 + std::fabs(results[0][j]))) << j;
  }
  // The wrong file for the job's digest is refused.
  TrainerOptions options;
  options.torchscript_bytes = File("native_mlp.pt");
  absl::StatusOr<std::unique_ptr<LocalTrainer>> wrong = LocalTrainer::Create(spec, options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(wrong.status().message(), HasSubstr("but the job names"));
}

// Token windows [N, T] of ids < 61 with next-token targets, as TOKENS data gives them.
Dataset Tokens(int64_t samples, int64_t seq_len) {
  Dataset data;
  data.source = "tokens";
  data.sample_shape = Shape{seq_len, 1, 1};
  data.sample_dims = {seq_len};
  data.feature_type = FeatureType::kInt64;
  data.target_kind = TargetKind::kInt64;
  data.target_dims = {seq_len};
  for (int64_t i = 0; i < samples * seq_len; ++i) {
    data.int_features.push_back((7 * i) % 61);
    data.int_targets.push_back((7 * (i + 1)) % 61);
  }
  return data;
}

// Float targets [N, 2]: a linear function of the 8 features plus a little noise.
Dataset Values(uint64_t samples) {
  Dataset data = MakeSynthetic(5, 0, samples, 8, 3);
  data.target_kind = TargetKind::kFloat32;
  data.target_dims = {2};
  for (uint64_t i = 0; i < samples; ++i) {
    const float* x = data.features.data() + i * 8;
    data.float_targets.push_back(x[0] - 2 * x[3] + 0.5f);
    data.float_targets.push_back(x[1] + x[2] - 1.0f);
  }
  data.labels.clear();
  data.num_classes = 0;
  return data;
}

TEST(TorchScriptTest, AModelsOwnLossCountsEveryElement) {
  const Dataset data = Tokens(12, 5);
  const ModelDef model = Fitted("token_lm.pt", data);
  ASSERT_NE(model.torchscript, nullptr);
  EXPECT_TRUE(model.torchscript->has_loss);
  EXPECT_TRUE(model.torchscript->has_metrics);
  EXPECT_EQ(model.torchscript->input_type, FeatureType::kInt64);
  EXPECT_EQ(model.loss_elements_per_sample, 5);  // One loss per token.
  EXPECT_EQ(model.metric_names, (std::vector<std::string>{"token_accuracy"}));
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 1, params.data());
  absl::StatusOr<std::unique_ptr<Replica>> replica = CreateTorchScriptReplica(model, params.data());
  ASSERT_TRUE(replica.ok()) << replica.status();
  BatchBuffer buffer;
  std::vector<uint64_t> ids = {0, 1, 2, 3};
  data.Gather(ids.data(), 4, buffer);
  absl::StatusOr<LossStats> trained = (*replica)->ForwardBackward(buffer.View(), {1, 0}, nullptr);
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->samples, 4);
  EXPECT_EQ(trained->loss_elements, 20);
  EXPECT_FALSE(trained->classified);
  EXPECT_EQ(trained->accuracy(), -1);
  // About ln(64) per token at the start: the mean is over the 20 tokens, not 4 samples.
  EXPECT_NEAR(trained->mean_loss(), std::log(64.0), 0.7);
  absl::StatusOr<LossStats> evaluated = (*replica)->Evaluate(buffer.View());
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(evaluated->loss_elements, 20);
  ASSERT_EQ(evaluated->metrics.count("token_accuracy"), 1u);
  const double accuracy = evaluated->MeanMetrics().at("token_accuracy");
  EXPECT_GE(accuracy, 0.0);
  EXPECT_LE(accuracy, 1.0);
}

// The step's gradient is the mean over every element of the global batch, so a split
// batch trains to the same parameters as a whole one (the SYNC contract), and training
// brings the per-token loss down.
TEST(TorchScriptTest, OwnLossTrainsTheSameWhateverTheReplicas) {
  std::shared_ptr<const std::string> bytes = File("token_lm.pt");
  Datasets data;
  data.train = Tokens(60, 6);
  data.test = Tokens(10, 6);
  v1::JobSpec spec;
  spec.mutable_model()->set_name(kTorchScriptModel);
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*bytes));
  spec.set_global_batch_size(12);
  spec.set_max_steps(40);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  std::vector<std::vector<float>> results;
  for (uint32_t replicas : {1u, 3u}) {
    TrainerOptions options;
    options.replicas = replicas;
    options.torchscript_bytes = bytes;
    auto trainer = LocalTrainer::Create(spec, options, data);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    absl::StatusOr<LossStats> before = (*trainer)->Evaluate();
    ASSERT_TRUE(before.ok()) << before.status();
    while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
    absl::StatusOr<LossStats> after = (*trainer)->Evaluate();
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_LT(after->mean_loss(), 0.5 * before->mean_loss());
    EXPECT_GT(after->MeanMetrics().at("token_accuracy"), 0.5);
    results.push_back((*trainer)->parameters());
  }
  for (size_t j = 0; j < results[0].size(); ++j) {
    ASSERT_NEAR(results[0][j], results[1][j], 1e-4f * (1 + std::fabs(results[0][j]))) << j;
  }
}

TEST(TorchScriptTest, RegressionTrainsOnFloatTargets) {
  std::shared_ptr<const std::string> bytes = File("regressor.pt");
  Datasets data;
  data.train = Values(200);
  data.test = Values(50);
  v1::JobSpec spec;
  spec.mutable_model()->set_name(kTorchScriptModel);
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*bytes));
  spec.set_global_batch_size(20);
  spec.set_max_steps(200);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  TrainerOptions options;
  options.torchscript_bytes = bytes;
  auto trainer = LocalTrainer::Create(spec, options, data);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->model().loss_elements_per_sample, 2);
  while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
  absl::StatusOr<LossStats> test = (*trainer)->Evaluate();
  ASSERT_TRUE(test.ok()) << test.status();
  // The targets' variance is about 1-5 per value; a linear model fits them almost exactly.
  EXPECT_LT(test->mean_loss(), 0.05);
  EXPECT_LT(test->MeanMetrics().at("mae"), 0.2);
  EXPECT_EQ(test->accuracy(), -1);
}

TEST(TorchScriptTest, GuardRailsNameTheFileTheMethodAndWhatItGot) {
  auto fit_error = [](const std::string& name, const Dataset& data) {
    absl::StatusOr<ModelDef> model = LoadTorchScriptModel(File(name), name, &data);
    return model.ok() ? std::string("fitted") : std::string(model.status().message());
  };
  const Dataset classes = Data();
  EXPECT_THAT(fit_error("reduced_loss.pt", classes),
              HasSubstr("model file reduced_loss.pt: loss(x, y) returns a Float [] tensor for 4 "
                        "samples; Tributary needs one float tensor of per-sample losses, shape "
                        "[4] or [4, ...]"));
  EXPECT_THAT(fit_error("vector_metrics.pt", classes),
              HasSubstr("model file vector_metrics.pt: metrics(x, y) returns Float [3] for "
                        "'per_class'"));
  // Float targets without a loss of its own: no cross-entropy can take them.
  EXPECT_THAT(fit_error("tiny_mlp.pt", Values(16)),
              HasSubstr("model file tiny_mlp.pt: has no loss(x, y) method, and dataset "
                        "synthetic(seed=5, train) has float32 features [8] and float32 "
                        "targets [2]"));
  // Integer ids into a model that multiplies floats: the dtype it got is named.
  Dataset ids = Tokens(8, 8);
  ids.target_kind = TargetKind::kClassId;
  ids.int_targets.clear();
  ids.target_dims.clear();
  ids.labels.assign(8, 1);
  ids.num_classes = 3;
  EXPECT_THAT(fit_error("tiny_mlp.pt", ids),
              HasSubstr("model file tiny_mlp.pt: forward fails on an input of Long [4, 8]"));
  // A softmax head is accepted, with a warning naming the fix.
  absl::StatusOr<ModelDef> softmax =
      LoadTorchScriptModel(File("softmax_head.pt"), "softmax_head.pt", &classes);
  ASSERT_TRUE(softmax.ok()) << softmax.status();
  ASSERT_EQ(softmax->fit_warnings.size(), 1u);
  EXPECT_THAT(softmax->fit_warnings[0],
              HasSubstr("softmax_head.pt: forward's rows are all >= 0 and sum to 1"));
  EXPECT_TRUE(Fitted("tiny_mlp.pt", classes).fit_warnings.empty());
  // The native models take float features and class ids only.
  v1::ModelSpec mlp;
  mlp.set_name("mlp");
  mlp.add_layer_sizes(8);
  mlp.add_layer_sizes(3);
  absl::StatusOr<ModelDef> native = BuildModel(mlp);
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_THAT(CheckModelFitsData(*native, ids).message(),
              HasSubstr("model mlp takes float32 features and class ids but dataset tokens has "
                        "int64 features [8] and class ids"));
}

TEST(TorchScriptTest, TrainerCarriesBuffersFromReplicaZero) {
  v1::JobSpec spec;
  spec.mutable_model()->set_name(kTorchScriptModel);
  std::shared_ptr<const std::string> bytes = File("tiny_bn.pt");
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*bytes));
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_features(8);
  spec.mutable_dataset()->set_synthetic_classes(3);
  spec.mutable_dataset()->set_synthetic_train_samples(200);
  spec.set_global_batch_size(40);
  spec.set_max_steps(7);
  TrainerOptions options;
  options.replicas = 2;
  options.torchscript_bytes = bytes;
  auto trainer = LocalTrainer::Create(spec, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  while (!(*trainer)->done()) ASSERT_TRUE((*trainer)->Step().ok());
  const ModelDef& model = (*trainer)->model();
  const std::vector<float>& p = (*trainer)->parameters();
  // num_batches_tracked counts replica 0's passes: one per step, not one per replica.
  EXPECT_EQ(p[model.tensors[8].offset], 7.0f);
  EXPECT_EQ(p[model.tensors[9].offset], 2.0f);  // The frozen scale never trains.
  EXPECT_NE(p[model.tensors[6].offset], 0.0f);
}

}  // namespace
}  // namespace tributary::engine
