// Training and test data as the model sees it, read from a DatasetSpec: IDX (MNIST /
// Fashion-MNIST, gzipped or not), CSV, NPY arrays of any dtype and per-sample shape,
// token streams (memory-mapped), or a seeded synthetic set. Every problem with a file is an error naming the file and what is
// wrong with it.
#ifndef TRIBUTARY_WORKER_ENGINE_DATASET_H_
#define TRIBUTARY_WORKER_ENGINE_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/model.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

class TokenStream;

// A batch's arrays, owned: what Dataset::Gather fills and a Batch points into.
struct BatchBuffer {
  std::vector<float> features;
  std::vector<int64_t> int_features;
  std::vector<int32_t> labels;
  std::vector<int64_t> int_targets;
  std::vector<float> float_targets;
  std::vector<uint64_t> ids;
  // A Batch of the arrays above (the kinds the dataset has; the others stay null).
  Batch View() const;
};

struct Dataset {
  std::string source;           // What it was read from, for messages.
  Shape sample_shape;           // [1, 28, 28] for IDX images; [features, 1, 1] otherwise.
  // One sample's exact shape when sample_shape cannot say it (NPY files of any rank);
  // empty otherwise. Use SampleDims().
  std::vector<int64_t> sample_dims;
  int64_t num_classes = 0;      // kClassId: 1 + the largest label; 0 otherwise.
  FeatureType feature_type = FeatureType::kFloat32;
  std::vector<float> features;  // kFloat32: size() * sample_shape.size(), sample-major.
  std::vector<int64_t> int_features;  // kInt64: likewise.
  TargetKind target_kind = TargetKind::kClassId;
  std::vector<int32_t> labels;  // kClassId: one per sample.
  // kInt64 / kFloat32 targets: one sample's shape ({} = one value) and the values,
  // sample-major.
  std::vector<int64_t> target_dims;
  std::vector<int64_t> int_targets;
  std::vector<float> float_targets;
  // A token stream (the features and targets above stay empty): sample i is the window
  // [i * seq_len, i * seq_len + seq_len + 1) of the stream, x its first seq_len ids and
  // y its last seq_len (kInt64 features and targets of shape [seq_len]).
  std::shared_ptr<const TokenStream> tokens;
  int64_t seq_len = 0;
  int64_t token_windows = 0;  // Windows in use (Truncate may keep fewer).

  int64_t size() const;
  int64_t feature_size() const { return sample_shape.size(); }
  // Values in one sample's target: 1 for class ids, the product of target_dims else.
  int64_t target_size() const;
  // One sample's shape as a model sees it: sample_dims, else [C, H, W] for images and
  // [features] for vectors (a TorchScript model gets [N, *SampleDims()]).
  std::vector<int64_t> SampleDims() const;
  // Copies samples ids[0, count) into features_out / labels_out (batch order). Float
  // features and class ids only.
  void Gather(const uint64_t* ids, int64_t count, float* features_out, int32_t* labels_out) const;
  // Copies samples ids[0, count) into `out` (ids included), whatever the data's kinds.
  void Gather(const uint64_t* ids, int64_t count, BatchBuffer& out) const;
  // Keeps the first `limit` samples (0 = all).
  void Truncate(uint64_t limit);
  // "float32 features [1, 28, 28] and class ids", for messages.
  std::string KindText() const;
};

// A 1-D integer NPY file of token ids, memory-mapped (read-only, shared by every
// replica and process that opens it): nothing is copied until a batch is gathered.
class TokenStream {
 public:
  // INVALID_ARGUMENT / NOT_FOUND naming the file: not a 1-D integer NPY (uint8, uint16,
  // int16, uint32, int32 or int64), fewer than 2 tokens, a negative id.
  static absl::StatusOr<std::shared_ptr<const TokenStream>> Open(const std::string& path);
  ~TokenStream();
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  const std::string& path() const { return path_; }
  int64_t length() const { return length_; }
  int64_t max_id() const { return max_id_; }  // The largest token id in the file.
  // Tokens [first, first + n) as int64 (first + n <= length()).
  void Copy(int64_t first, int64_t n, int64_t* out) const;

 private:
  TokenStream() = default;
  std::string path_;
  const unsigned char* data_ = nullptr;  // The first token.
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t length_ = 0;
  int element_bytes_ = 0;
  bool is_signed_ = false;
  int64_t max_id_ = 0;
};

// The windows of `stream` for seq_len (>= 1): (length - 1) / seq_len samples.
absl::StatusOr<Dataset> TokenWindows(std::shared_ptr<const TokenStream> stream, int64_t seq_len);

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
