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
              HasSubstr("model file wrong_shape.pt: forward returns a Float tensor of shape "
                        "[4, 3, 1] for an input of shape [4, 8]"));
  EXPECT_THAT(fit_error("two_classes.pt", data),
              HasSubstr("forward returns 2 class scores per sample but dataset"));
  EXPECT_THAT(fit_error("returns_nan.pt", data), HasSubstr("returns non-finite values"));
  const Dataset five = MakeSynthetic(5, 0, 16, 5, 3);
  EXPECT_THAT(fit_error("tiny_mlp.pt", five),
              HasSubstr("model file tiny_mlp.pt: forward fails on an input of shape [4, 5]: "
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
