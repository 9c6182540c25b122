// The .npy reader against files NumPy wrote (testdata/npy/make_npy_files.py) and
// against broken headers written here.
#include "worker/engine/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "worker/engine/dataset.h"

namespace tributary::engine {
namespace {

using ::testing::HasSubstr;

const std::string kDir = "worker/engine/testdata/npy/";

std::string Error(const std::string& x, const std::string& y) {
  absl::StatusOr<Dataset> data = ReadNpy(kDir + x, kDir + y);
  return data.ok() ? "read" : std::string(data.status().message());
}

std::string Temp(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A version-1 .npy file with the given header dictionary and data.
std::string Npy(const std::string& dict, const std::string& data, char major = 1) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out = std::string("\x93NUMPY", 6) + major + '\0';
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

TEST(NpyTest, ReadsImagesOfAnyShapeWithIntegerLabels) {
  absl::StatusOr<Dataset> data = ReadNpy(kDir + "images_f4.npy", kDir + "labels_i8.npy");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 6);
  EXPECT_EQ(data->SampleDims(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(data->sample_shape, (Shape{1, 2, 2}));
  EXPECT_EQ(data->num_classes, 3);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{0, 1, 2, 1, 0, 2}));
  EXPECT_FLOAT_EQ(data->features[23], 2.3f);
  absl::StatusOr<Dataset> doubles = ReadNpy(kDir + "images_f8.npy", kDir + "labels_u1.npy");
  ASSERT_TRUE(doubles.ok()) << doubles.status();
  EXPECT_EQ(doubles->features, data->features);
  EXPECT_EQ(doubles->labels, data->labels);
}

TEST(NpyTest, ScalesBytesLikeIdxPixels) {
  absl::StatusOr<Dataset> data = ReadNpy(kDir + "pixels_u1.npy", kDir + "labels_i8.npy");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->SampleDims(), (std::vector<int64_t>{4}));
  EXPECT_EQ(data->feature_size(), 4);
  EXPECT_FLOAT_EQ(data->features[1], 10.0f / 255.0f);
  EXPECT_FLOAT_EQ(data->features[23], 230.0f / 255.0f);
}

TEST(NpyTest, RefusesWrongTypesShapesAndCountsNamingTheFile) {
  EXPECT_THAT(Error("images_f4.npy", "labels_short.npy"),
              HasSubstr("labels_short.npy: 3 labels for the 6 samples of"));
  EXPECT_THAT(Error("images_f4.npy", "labels_float.npy"),
              HasSubstr("labels_float.npy: labels of dtype '<f4': labels must be integers"));
  EXPECT_THAT(Error("images_f4.npy", "labels_negative.npy"),
              HasSubstr("label of sample 2 is outside [0, 2^31)"));
  EXPECT_THAT(Error("labels_i8.npy", "labels_i8.npy"),
              HasSubstr("labels_i8.npy: features of dtype '<i8': use float32, float64 or uint8"));
  EXPECT_THAT(Error("images_f4.npy", "pixels_u1.npy"),
              HasSubstr("labels of shape (6, 4): need one label per sample"));
  EXPECT_THAT(Error("fortran.npy", "labels_i8.npy"), HasSubstr("Fortran order"));
  EXPECT_THAT(Error("big_endian.npy", "labels_i8.npy"), HasSubstr("is big-endian"));
  EXPECT_THAT(Error("strings.npy", "labels_i8.npy"), HasSubstr("unsupported dtype '<U1'"));
  EXPECT_THAT(Error("nan.npy", "labels_i8.npy"),
              HasSubstr("nan.npy: sample 1 holds a non-finite value"));
  EXPECT_THAT(Error("missing.npy", "labels_i8.npy"),
              HasSubstr("dataset file worker/engine/testdata/npy/missing.npy: cannot read it"));
  EXPECT_THAT(Error("make_npy_files.py", "labels_i8.npy"), HasSubstr("not a .npy file"));
}

TEST(NpyTest, RefusesBrokenHeadersAndData) {
  const std::string labels = kDir + "labels_i8.npy";
  auto error = [&](const std::string& name, const std::string& bytes) {
    absl::StatusOr<Dataset> data = ReadNpy(Temp(name, bytes), labels);
    return data.ok() ? std::string("read") : std::string(data.status().message());
  };
  const std::string six_floats(6 * 4, '\0');
  EXPECT_EQ(
      error("ok.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", six_floats)),
      "read");
  EXPECT_THAT(error("short.npy",
                    Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6, 2), }", six_floats)),
              HasSubstr("short.npy: shape (6, 2) of '<f4' needs 48 bytes of data, the file "
                        "holds 24"));
  EXPECT_THAT(error("noshape.npy", Npy("{'descr': '<f4', 'fortran_order': False}", six_floats)),
              HasSubstr("header has no readable 'shape' entry"));
  EXPECT_THAT(error("badshape.npy",
                    Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6, x), }", six_floats)),
              HasSubstr("holds 'x'"));
  EXPECT_THAT(error("huge.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                    "(18446744073709551615, 4), }",
                                    six_floats)),
              HasSubstr("holds '18446744073709551615'"));
  EXPECT_THAT(error("overflow.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                        "(4294967296, 4294967296), }",
                                        six_floats)),
              HasSubstr("is too large"));
  EXPECT_THAT(error("v9.npy", Npy("{}", "", 9)), HasSubstr("format version 9 is not 1, 2 or 3"));
  EXPECT_THAT(error("cut.npy", std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17)),
              HasSubstr("truncated .npy header"));
  EXPECT_THAT(
      error("empty.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", "")),
      HasSubstr("need [samples, ...] with at least one sample"));
}

TEST(NpyTest, LoadDatasetsReadsTrainAndTestSplits) {
  v1::DatasetSpec spec;
  spec.set_format(v1::NPY);
  spec.set_train_path(kDir + "images_f4.npy");
  spec.set_train_labels_path(kDir + "labels_i8.npy");
  spec.set_test_path(kDir + "images_f8.npy");
  spec.set_test_labels_path(kDir + "labels_u1.npy");
  spec.set_train_limit(4);
  absl::StatusOr<Datasets> data = LoadDatasets(spec, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 4);
  EXPECT_EQ(data->test.size(), 6);
  // Test samples must have the training samples' shape.
  spec.set_test_path(kDir + "pixels_u1.npy");
  absl::StatusOr<Datasets> mismatched = LoadDatasets(spec, 1);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(mismatched.status().message(), HasSubstr("have 4 features"));
}

}  // namespace
}  // namespace tributary::engine
