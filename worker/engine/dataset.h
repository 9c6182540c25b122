// Training and test data held in memory as float features and int32 labels, read
// from a DatasetSpec: IDX (MNIST / Fashion-MNIST, gzipped or not), CSV, or a seeded
// synthetic set. Every problem with a file is an error naming the file and what is
// wrong with it.
#ifndef TRIBUTARY_WORKER_ENGINE_DATASET_H_
#define TRIBUTARY_WORKER_ENGINE_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/model.h"

namespace tributary::engine {

struct Dataset {
  std::string source;           // What it was read from, for messages.
  Shape sample_shape;           // [1, 28, 28] for IDX images; [features, 1, 1] otherwise.
  // One sample's exact shape when sample_shape cannot say it (NPY files of any rank);
  // empty otherwise. Use SampleDims().
  std::vector<int64_t> sample_dims;
  int64_t num_classes = 0;      // 1 + the largest label.
  std::vector<float> features;  // size() * sample_shape.size(), sample-major.
  std::vector<int32_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t feature_size() const { return sample_shape.size(); }
  // One sample's shape as a model sees it: sample_dims, else [C, H, W] for images and
  // [features] for vectors (a TorchScript model gets [N, *SampleDims()]).
  std::vector<int64_t> SampleDims() const;
  // Copies samples ids[0, count) into features_out / labels_out (batch order).
  void Gather(const uint64_t* ids, int64_t count, float* features_out, int32_t* labels_out) const;
  // Keeps the first `limit` samples (0 = all).
  void Truncate(uint64_t limit);
};

struct Datasets {
  Dataset train;
  Dataset test;  // Empty when the spec has no test data (CSV without test_path).
};

// Reads the data a job's DatasetSpec names (defaults applied), applying
// train_limit/test_limit and normalize. seed drives SYNTHETIC data.
absl::StatusOr<Datasets> LoadDatasets(const v1::DatasetSpec& spec, uint64_t seed);

// One IDX pair: images (magic 0x00000803, unsigned bytes scaled to [0, 1]) and labels
// (magic 0x00000801). Plain or gzip-compressed files are both read.
absl::StatusOr<Dataset> ReadIdx(const std::string& images_path, const std::string& labels_path);

// Finds `name` in `directory` as name.gz or name (gz first); NOT_FOUND naming both.
absl::StatusOr<std::string> FindIdxFile(const std::string& directory, const std::string& name);

// One CSV file: every non-empty line is a sample with an integer label in column
// `label_column` and numeric features in the other columns (used as given).
absl::StatusOr<Dataset> ReadCsv(const std::string& path, uint32_t label_column, bool has_header);

// Seeded Gaussian clusters: class centres drawn from `seed`, samples = centre + noise.
// `split` (0 = train, 1 = test) selects an independent stream over the same centres.
Dataset MakeSynthetic(uint64_t seed, int split, uint64_t samples, uint32_t features,
                      uint32_t classes);

// Standardises every feature of train and test with the training set's mean and
// standard deviation (features whose deviation is ~0 are only centred).
void Normalize(Datasets& data);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_DATASET_H_
