#include "worker/engine/dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace tributary::engine {
namespace {

bool HaveFashionMnist(std::string* why) {
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    absl::StatusOr<std::string> path = FindIdxFile(kDefaultIdxDirectory, name);
    if (!path.ok()) {
      *why = std::string(path.status().message());
      return false;
    }
  }
  return true;
}

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), bytes.size());
  gzclose(f);
}

std::string BigEndian(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string IdxImages(uint32_t count, uint32_t rows, uint32_t cols, size_t body_bytes) {
  std::string data = BigEndian(0x803) + BigEndian(count) + BigEndian(rows) + BigEndian(cols);
  for (size_t i = 0; i < body_bytes; ++i) data.push_back(static_cast<char>(i * 37));
  return data;
}

std::string IdxLabels(uint32_t count) {
  std::string data = BigEndian(0x801) + BigEndian(count);
  for (uint32_t i = 0; i < count; ++i) data.push_back(static_cast<char>(i % 3));
  return data;
}

TEST(DatasetTest, ReadsFashionMnist) {
  std::string why;
  if (!HaveFashionMnist(&why)) GTEST_SKIP() << "Fashion-MNIST not installed: " << why;
  v1::JobSpec spec = WithDefaults(v1::JobSpec());
  absl::StatusOr<Datasets> data = LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 60000);
  EXPECT_EQ(data->test.size(), 10000);
  EXPECT_EQ(data->train.sample_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(data->test.sample_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(data->train.num_classes, 10);
  std::vector<int> per_class(10);
  for (int32_t label : data->train.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
    ++per_class[label];
  }
  for (int count : per_class) EXPECT_EQ(count, 6000);  // Fashion-MNIST is balanced.
  float lo = 1, hi = 0;
  for (float x : data->test.features) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

TEST(DatasetTest, LimitsAndNormalisation) {
  std::string why;
  if (!HaveFashionMnist(&why)) GTEST_SKIP() << "Fashion-MNIST not installed: " << why;
  v1::JobSpec spec = WithDefaults(v1::JobSpec());
  spec.mutable_dataset()->set_train_limit(500);
  spec.mutable_dataset()->set_test_limit(100);
  spec.mutable_dataset()->set_normalize(true);
  absl::StatusOr<Datasets> data = LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 500);
  EXPECT_EQ(data->test.size(), 100);
  // Pixel 14*28+14 (image centre): mean ~0 and variance ~1 over the training subset.
  double mean = 0, square = 0;
  for (int64_t i = 0; i < 500; ++i) {
    const double x = data->train.features[i * 784 + 14 * 28 + 14];
    mean += x;
    square += x * x;
  }
  EXPECT_NEAR(mean / 500, 0, 1e-4);
  EXPECT_NEAR(square / 500, 1, 1e-3);
}

TEST(DatasetTest, ReadsPlainAndGzipIdx) {
  const std::string dir = TempDir("idx_ok");
  WriteFile(dir + "/images", IdxImages(3, 2, 2, 12));
  WriteGzip(dir + "/labels.gz", IdxLabels(3));
  absl::StatusOr<Dataset> data = ReadIdx(dir + "/images", dir + "/labels.gz");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3);
  EXPECT_EQ(data->sample_shape, (Shape{1, 2, 2}));
  EXPECT_EQ(data->num_classes, 3);
  EXPECT_FLOAT_EQ(data->features[1], 37 / 255.0f);
}

TEST(DatasetTest, MissingFilesNameTheFile) {
  v1::DatasetSpec spec;
  spec.set_format(v1::IDX);
  spec.set_directory("/nonexistent/fmnist");
  absl::StatusOr<Datasets> data = LoadDatasets(spec, 1);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(data.status().message().find("/nonexistent/fmnist/train-images-idx3-ubyte.gz"),
            std::string::npos)
      << data.status();
}

TEST(DatasetTest, CorruptIdxFilesSayWhatIsWrong) {
  const std::string dir = TempDir("idx_bad");
  WriteGzip(dir + "/labels.gz", IdxLabels(3));
  struct BadCase {
    std::string name;
    std::string images;
    bool gzip;
    std::string expect;
  };
  const std::vector<BadCase> cases = {
      {"truncated", IdxImages(3, 2, 2, 10), false, "truncated"},
      {"truncated_gz", IdxImages(3, 2, 2, 7), true, "truncated"},
      {"extra", IdxImages(3, 2, 2, 14), false, "extra bytes"},
      {"magic", BigEndian(0x801) + IdxImages(3, 2, 2, 12).substr(4), false, "does not start with the magic 0x00000803"},
      {"count", IdxImages(4, 2, 2, 16), false, "4 images but 3 labels"},
      {"short", std::string("\0\0\x08", 3), false, "shorter than the 16-byte IDX header"},
  };
  for (const BadCase& c : cases) {
    const std::string path = dir + "/" + c.name + (c.gzip ? ".gz" : "");
    if (c.gzip) {
      WriteGzip(path, c.images);
    } else {
      WriteFile(path, c.images);
    }
    absl::StatusOr<Dataset> data = ReadIdx(path, dir + "/labels.gz");
    ASSERT_FALSE(data.ok()) << c.name;
    EXPECT_NE(data.status().message().find(path), std::string::npos) << data.status();
    EXPECT_NE(data.status().message().find(c.expect), std::string::npos) << data.status();
  }
  // A gzip stream cut in the middle.
  std::string gz_path = dir + "/cut.gz";
  WriteGzip(gz_path, IdxImages(3, 2, 2, 12) + std::string(4000, 'x'));
  std::ifstream in(gz_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WriteFile(gz_path, bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<Dataset> cut = ReadIdx(gz_path, dir + "/labels.gz");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(gz_path), std::string::npos) << cut.status();
}

TEST(DatasetTest, ReadsCsvAndReportsBadLines) {
  const std::string dir = TempDir("csv");
  WriteFile(dir + "/ok.csv", "x1,label,x2\n0.5,1,2\n-1,0,3.25\n\n4,2,5\n");
  absl::StatusOr<Dataset> data = ReadCsv(dir + "/ok.csv", 1, true);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3);
  EXPECT_EQ(data->sample_shape, (Shape{2, 1, 1}));
  EXPECT_EQ(data->num_classes, 3);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(data->features, (std::vector<float>{0.5f, 2, -1, 3.25f, 4, 5}));

  WriteFile(dir + "/word.csv", "1,2,3\n0,abc,1\n");
  absl::StatusOr<Dataset> word = ReadCsv(dir + "/word.csv", 0, false);
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("word.csv:2"), std::string::npos) << word.status();
  EXPECT_NE(word.status().message().find("column 1 (3 characters) is not a finite number"), std::string::npos) << word.status();

  WriteFile(dir + "/ragged.csv", "1,2,3\n0,1\n");
  absl::StatusOr<Dataset> ragged = ReadCsv(dir + "/ragged.csv", 0, false);
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.status().message().find("2 columns, expected 3"), std::string::npos);

  WriteFile(dir + "/label.csv", "1.5,2\n");
  EXPECT_FALSE(ReadCsv(dir + "/label.csv", 0, false).ok());
  EXPECT_EQ(ReadCsv(dir + "/none.csv", 0, false).status().code(), absl::StatusCode::kNotFound);
}

// A CSV path that points at a file that is not data (a secret, say) must not show its
// contents in the error, which reaches GetJob and the dashboard.
TEST(DatasetTest, CsvErrorsNeverQuoteTheFile) {
  const std::string dir = TempDir("csv_secret");
  WriteFile(dir + "/label.csv", "hunter2-secret,0.5\n");
  WriteFile(dir + "/feature.csv", "1,hunter2-secret\n");
  WriteFile(dir + "/colon.csv", "root:x:0:0:root:/root:/bin/bash\n");
  for (const char* name : {"label.csv", "feature.csv", "colon.csv"}) {
    absl::StatusOr<Dataset> data = ReadCsv(dir + "/" + name, 0, false);
    ASSERT_FALSE(data.ok()) << name;
    const std::string message(data.status().message());
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_EQ(message.find("hunter2"), std::string::npos) << message;
    EXPECT_EQ(message.find("root:x"), std::string::npos) << message;
  }
}

TEST(DatasetTest, SyntheticIsSeeded) {
  const Dataset a = MakeSynthetic(3, 0, 100, 8, 4);
  const Dataset b = MakeSynthetic(3, 0, 100, 8, 4);
  const Dataset c = MakeSynthetic(4, 0, 100, 8, 4);
  const Dataset test = MakeSynthetic(3, 1, 100, 8, 4);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.features, c.features);
  EXPECT_NE(a.features, test.features);
  EXPECT_EQ(a.num_classes, 4);
  for (int32_t label : a.labels) EXPECT_LT(label, 4);
}

TEST(DatasetTest, GatherCopiesSamplesInOrder) {
  const Dataset data = MakeSynthetic(1, 0, 10, 3, 2);
  const std::vector<uint64_t> ids = {7, 2};
  std::vector<float> features(6);
  std::vector<int32_t> labels(2);
  data.Gather(ids.data(), 2, features.data(), labels.data());
  EXPECT_EQ(features[0], data.features[21]);
  EXPECT_EQ(features[5], data.features[8]);
  EXPECT_EQ(labels[0], data.labels[7]);
  EXPECT_EQ(labels[1], data.labels[2]);
}

// A batch buffer is reused from step to step: a gather into it leaves exactly the new
// batch (its size, every row and label), whatever the buffer held.
TEST(DatasetTest, GatherIntoAUsedBufferLeavesExactlyTheNewBatch) {
  const Dataset data = MakeSynthetic(1, 0, 50, 300, 3);
  const int64_t width = data.feature_size();
  BatchBuffer buffer;
  const std::vector<uint64_t> first = {7, 2, 41};
  data.Gather(first.data(), 3, buffer);
  for (const std::vector<uint64_t>& ids :
       {std::vector<uint64_t>{49, 0}, std::vector<uint64_t>{3, 3, 17, 8}}) {
    data.Gather(ids.data(), static_cast<int64_t>(ids.size()), buffer);
    ASSERT_EQ(buffer.features.size(), ids.size() * width);
    ASSERT_EQ(buffer.labels.size(), ids.size());
    EXPECT_EQ(buffer.ids, ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_TRUE(std::equal(buffer.features.begin() + i * width,
                             buffer.features.begin() + (i + 1) * width,
                             data.features.begin() + ids[i] * width))
          << "row " << i << " (sample " << ids[i] << ")";
      EXPECT_EQ(buffer.labels[i], data.labels[ids[i]]);
    }
    EXPECT_TRUE(buffer.int_features.empty());
    EXPECT_TRUE(buffer.float_targets.empty());
  }
}

}  // namespace
}  // namespace tributary::engine
