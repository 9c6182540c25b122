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

// Integer features reach the model as int64 ids, never scaled (a uint8 file once came
// out divided by 255 and a token model trained on it to the majority class).
TEST(NpyTest, KeepsIntegerFeaturesAsTheyAre) {
  absl::StatusOr<Dataset> data = ReadNpy(kDir + "pixels_u1.npy", kDir + "labels_i8.npy");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->SampleDims(), (std::vector<int64_t>{4}));
  EXPECT_EQ(data->feature_size(), 4);
  EXPECT_EQ(data->feature_type, FeatureType::kInt64);
  EXPECT_TRUE(data->features.empty());
  ASSERT_EQ(data->int_features.size(), 24u);
  EXPECT_EQ(data->int_features[1], 10);
  EXPECT_EQ(data->int_features[23], 230);
  absl::StatusOr<Dataset> flags = ReadNpy(kDir + "flags_bool.npy", kDir + "labels_i8.npy");
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->int_features[0], 1);
  EXPECT_EQ(flags->int_features[1], 0);
  EXPECT_EQ(flags->KindText(), "int64 features [4] and class ids");
}

TEST(NpyTest, ReadsIntegerSequencesAndFloatTargets) {
  absl::StatusOr<Dataset> sequences = ReadNpy(kDir + "pixels_u1.npy", kDir + "targets_seq_i8.npy");
  ASSERT_TRUE(sequences.ok()) << sequences.status();
  EXPECT_EQ(sequences->target_kind, TargetKind::kInt64);
  EXPECT_EQ(sequences->target_dims, (std::vector<int64_t>{3}));
  EXPECT_EQ(sequences->size(), 6);
  EXPECT_EQ(sequences->int_targets[0], -2);  // Any int64: an ignore index is the loss's affair.
  EXPECT_EQ(sequences->num_classes, 0);
  absl::StatusOr<Dataset> values = ReadNpy(kDir + "images_f4.npy", kDir + "targets_f4.npy");
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->target_kind, TargetKind::kFloat32);
  EXPECT_EQ(values->target_dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(values->KindText(), "float32 features [1, 2, 2] and float32 targets [2]");
  // Float labels of shape (samples,): one regression value per sample.
  absl::StatusOr<Dataset> scalar = ReadNpy(kDir + "images_f4.npy", kDir + "labels_float.npy");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->target_kind, TargetKind::kFloat32);
  EXPECT_TRUE(scalar->target_dims.empty());
  EXPECT_EQ(scalar->size(), 6);
  EXPECT_FLOAT_EQ(scalar->float_targets[2], 2.0f);

  // Gathered in batch order, whatever the kinds.
  BatchBuffer buffer;
  const uint64_t ids[] = {4, 1};
  sequences->Gather(ids, 2, buffer);
  const Batch batch = buffer.View();
  EXPECT_EQ(batch.count, 2);
  ASSERT_NE(batch.int_features, nullptr);
  EXPECT_EQ(batch.features, nullptr);
  EXPECT_EQ(batch.labels, nullptr);
  EXPECT_EQ(batch.int_features[0], 160);  // Sample 4's first value.
  EXPECT_EQ(batch.int_features[4], 40);   // Sample 1's.
  EXPECT_EQ(batch.int_targets[0], 10);
  EXPECT_EQ(batch.int_targets[3], 1);
  EXPECT_EQ(batch.sample_ids[1], 1u);
  values->Gather(ids, 2, buffer);
  EXPECT_EQ(buffer.View().int_features, nullptr);
  EXPECT_FLOAT_EQ(buffer.View().float_targets[1], 9 / 4.0f);
}

TEST(NpyTest, RefusesWrongTypesShapesAndCountsNamingTheFile) {
  EXPECT_THAT(Error("images_f4.npy", "labels_short.npy"),
              HasSubstr("labels_short.npy: 3 labels for the 6 samples of"));
  EXPECT_THAT(Error("images_f4.npy", "labels_negative.npy"),
              HasSubstr("label of sample 2 is -1, outside [0, 2^31)"));
  EXPECT_THAT(Error("fortran.npy", "labels_i8.npy"), HasSubstr("Fortran order"));
  EXPECT_THAT(Error("big_endian.npy", "labels_i8.npy"), HasSubstr("is big-endian"));
  EXPECT_THAT(Error("strings.npy", "labels_i8.npy"), HasSubstr("unsupported dtype '<U1'"));
  EXPECT_THAT(Error("images_f4.npy", "strings.npy"), HasSubstr("unsupported dtype '<U1'"));
  EXPECT_THAT(Error("nan.npy", "labels_i8.npy"),
              HasSubstr("nan.npy: features of sample 1 holds a non-finite value"));
  EXPECT_THAT(Error("missing.npy", "labels_i8.npy"),
              HasSubstr("dataset file worker/engine/testdata/npy/missing.npy: cannot read it"));
  EXPECT_THAT(Error("make_npy_files.py", "labels_i8.npy"), HasSubstr("not a .npy file"));
  const std::string u8 =
      Temp("u8.npy", Npy("{'descr': '<u8', 'fortran_order': False, 'shape': (6,), }",
                         std::string(48, '\0')));
  absl::StatusOr<Dataset> unsigned64 = ReadNpy(u8, kDir + "labels_i8.npy");
  ASSERT_FALSE(unsigned64.ok());
  EXPECT_THAT(unsigned64.status().message(),
              HasSubstr("u8.npy: features of dtype '<u8': use float32, float64, int64"));
  const std::string half =
      Temp("f2.npy", Npy("{'descr': '<f2', 'fortran_order': False, 'shape': (6,), }",
                         std::string(12, '\0')));
  absl::StatusOr<Dataset> halves = ReadNpy(kDir + "images_f4.npy", half);
  ASSERT_FALSE(halves.ok());
  EXPECT_THAT(halves.status().message(), HasSubstr("f2.npy: labels (targets) of dtype '<f2'"));
}

TEST(NpyTest, TokenStreamsAreWindowsOverAMappedFile) {
  absl::StatusOr<std::shared_ptr<const TokenStream>> stream =
      TokenStream::Open(kDir + "tokens_u2.npy");
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->length(), 50);
  EXPECT_EQ((*stream)->max_id(), 60);
  absl::StatusOr<Dataset> windows = TokenWindows(*stream, 8);
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(windows->size(), 6);  // (50 - 1) / 8.
  EXPECT_EQ(windows->SampleDims(), (std::vector<int64_t>{8}));
  EXPECT_EQ(windows->feature_size(), 8);
  EXPECT_EQ(windows->KindText(), "int64 features [8] and int64 targets [8]");
  BatchBuffer buffer;
  const uint64_t ids[] = {5, 0};
  windows->Gather(ids, 2, buffer);
  const Batch batch = buffer.View();
  ASSERT_EQ(buffer.int_features.size(), 16u);
  // Window 5 is tokens [40, 49): x = 40..47, y = 41..48; token i is 7 i mod 61.
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(batch.int_features[t], (7 * (40 + t)) % 61);
    EXPECT_EQ(batch.int_targets[t], (7 * (41 + t)) % 61);
    EXPECT_EQ(batch.int_features[8 + t], (7 * t) % 61);
    EXPECT_EQ(batch.int_targets[8 + t], (7 * (t + 1)) % 61);
  }
  windows->Truncate(2);
  EXPECT_EQ(windows->size(), 2);
  // One window of all 49 inputs fits; 50 would need 51 tokens.
  EXPECT_TRUE(TokenWindows(*stream, 49).ok());
  absl::StatusOr<Dataset> too_long = TokenWindows(*stream, 50);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(too_long.status().message(), HasSubstr("50 tokens hold no window of 51"));
  EXPECT_THAT(TokenWindows(*stream, 0).status().message(), HasSubstr("seq_len: must be in [1"));

  auto error = [](const std::string& name) {
    absl::StatusOr<std::shared_ptr<const TokenStream>> opened = TokenStream::Open(kDir + name);
    return opened.ok() ? std::string("opened") : std::string(opened.status().message());
  };
  EXPECT_THAT(error("tokens_2d.npy"), HasSubstr("shape (5, 2): token ids must be one flat array"));
  EXPECT_THAT(error("tokens_negative.npy"), HasSubstr("token 2 is -3: ids must be >= 0"));
  EXPECT_THAT(error("labels_float.npy"),
              HasSubstr("labels_float.npy: dtype '<f4': token ids must be an integer array"));
  EXPECT_THAT(error("nothing.npy"), HasSubstr("nothing.npy: cannot read it"));
}

TEST(NpyTest, LoadDatasetsReadsTokenFiles) {
  v1::DatasetSpec spec;
  spec.set_format(v1::TOKENS);
  spec.set_train_path(kDir + "tokens_u2.npy");
  spec.set_test_path(kDir + "tokens_u2.npy");
  spec.set_seq_len(4);
  spec.set_train_limit(5);
  absl::StatusOr<Datasets> data = LoadDatasets(spec, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 5);
  EXPECT_EQ(data->test.size(), 12);
  spec.set_normalize(true);
  absl::StatusOr<Datasets> normalized = LoadDatasets(spec, 1);
  ASSERT_FALSE(normalized.ok());
  EXPECT_THAT(normalized.status().message(),
              HasSubstr("dataset.normalize: dataset worker/engine/testdata/npy/tokens_u2.npy has "
                        "int64 features"));
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
  // And their kinds: float targets against class ids.
  spec.set_test_path(kDir + "images_f4.npy");
  spec.set_test_labels_path(kDir + "labels_float.npy");
  absl::StatusOr<Datasets> other_kind = LoadDatasets(spec, 1);
  ASSERT_FALSE(other_kind.ok());
  EXPECT_THAT(other_kind.status().message(),
              HasSubstr("are float32 features [1, 2, 2] and float32 targets []; training "));
}

}  // namespace
}  // namespace tributary::engine
