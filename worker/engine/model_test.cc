#include "worker/engine/model.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "worker/engine/model_registry.h"

namespace tributary::engine {
namespace {

v1::ModelSpec Mlp(std::vector<uint32_t> sizes) {
  v1::ModelSpec spec;
  spec.set_name("mlp");
  for (uint32_t s : sizes) spec.add_layer_sizes(s);
  return spec;
}

TEST(ModelTest, MlpLayoutIsContiguousInStableOrder) {
  absl::StatusOr<ModelDef> model = BuildModel(Mlp({784, 256, 128, 10}));
  ASSERT_TRUE(model.ok()) << model.status();
  const v1::ParameterLayout layout = model->Layout();
  const std::vector<std::string> names = {"fc1.weight", "fc1.bias",   "fc2.weight",
                                          "fc2.bias",   "fc3.weight", "fc3.bias"};
  ASSERT_EQ(layout.tensors_size(), 6);
  int64_t offset = 0;
  for (int i = 0; i < 6; ++i) {
    const v1::TensorView& view = layout.tensors(i);
    EXPECT_EQ(view.name(), names[i]);
    EXPECT_EQ(view.offset(), offset);
    int64_t product = 1;
    for (int64_t d : view.shape()) product *= d;
    EXPECT_EQ(product, view.length()) << view.name();
    offset += view.length();
  }
  EXPECT_EQ(layout.tensors(0).shape(0), 256);
  EXPECT_EQ(layout.tensors(0).shape(1), 784);
  EXPECT_EQ(layout.total_elements(), offset);
  EXPECT_EQ(offset, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(model->num_classes, 10);
  EXPECT_EQ(model->TensorAt(784 * 256), 1);
  EXPECT_EQ(model->TensorAt(offset), -1);
}

TEST(ModelTest, CnnShapesFitFashionMnist) {
  v1::ModelSpec spec;
  spec.set_name("cnn");
  for (uint32_t s : {128, 10}) spec.add_layer_sizes(s);
  for (uint32_t s : {32, 64}) spec.add_conv_channels(s);
  for (uint32_t s : {1, 28, 28}) spec.add_input_shape(s);
  absl::StatusOr<ModelDef> model = BuildModel(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const v1::ParameterLayout layout = model->Layout();
  ASSERT_EQ(layout.tensors_size(), 8);
  EXPECT_EQ(layout.tensors(0).name(), "conv1.weight");
  EXPECT_EQ(layout.tensors(2).name(), "conv2.weight");
  EXPECT_EQ(layout.tensors(4).name(), "fc1.weight");
  EXPECT_EQ(layout.tensors(4).shape(1), 64 * 7 * 7);
  EXPECT_EQ(model->input, (Shape{1, 28, 28}));
}

TEST(ModelTest, UnknownModelNamesTheRegisteredOnes) {
  v1::ModelSpec spec;
  spec.set_name("resnet");
  absl::StatusOr<ModelDef> model = BuildModel(spec);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("resnet"), std::string::npos);
  EXPECT_NE(model.status().message().find("cnn, logreg, mlp"), std::string::npos);
}

TEST(ModelTest, BuilderRejectsShapesThatDoNotFit) {
  ModelBuilder image("bad", Shape{1, 4, 4});
  image.Linear("fc1", 3);
  absl::StatusOr<ModelDef> model = std::move(image).Build();
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("Flatten"), std::string::npos) << model.status();

  ModelBuilder pool("bad", Shape{1, 3, 3});
  pool.MaxPool2d(4);
  EXPECT_FALSE(std::move(pool).Build().ok());

  ModelBuilder classes("bad", Shape{4, 1, 1});
  classes.Linear("fc1", 1);
  EXPECT_FALSE(std::move(classes).Build().ok());

  EXPECT_FALSE(BuildModel(Mlp({784})).ok());
}

TEST(ModelTest, InitIsAPureFunctionOfTheSeed) {
  absl::StatusOr<ModelDef> model = BuildModel(Mlp({20, 16, 4}));
  ASSERT_TRUE(model.ok());
  std::vector<float> a(model->num_parameters), b(model->num_parameters), c(model->num_parameters);
  InitParameters(*model, 7, a.data());
  InitParameters(*model, 7, b.data());
  InitParameters(*model, 8, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Uniform in +-1/sqrt(fan_in), with both signs present.
  for (const TensorInfo& t : model->tensors) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.fan_in));
    float lo = 1, hi = -1;
    for (int64_t i = t.offset; i < t.offset + t.length; ++i) {
      EXPECT_LE(std::abs(a[i]), bound * 1.0001f) << t.name;
      lo = std::min(lo, a[i]);
      hi = std::max(hi, a[i]);
    }
    EXPECT_LT(lo, 0) << t.name;
    EXPECT_GT(hi, 0) << t.name;
  }
}

TEST(ModelTest, ForwardCostCountsMultiplyAdds) {
  absl::StatusOr<ModelDef> model = BuildModel(Mlp({784, 256, 128, 10}));
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->ForwardMacsPerSample(), 784 * 256 + 256 * 128 + 128 * 10);
}

}  // namespace
}  // namespace tributary::engine
