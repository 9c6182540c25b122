// NumPy's .npy files (format versions 1.0, 2.0 and 3.0), the common way to bring
// arrays out of Python: `np.save("train_x.npy", x)`. Features of float32, float64 or
// uint8 (scaled to [0, 1], like IDX pixels) with any per-sample shape; labels of any
// integer type, one per sample. Every problem is an error naming the file.
#ifndef TRIBUTARY_WORKER_ENGINE_NPY_H_
#define TRIBUTARY_WORKER_ENGINE_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/dataset.h"

namespace tributary::engine {

// What an .npy header says.
struct NpyHeader {
  std::string descr;  // e.g. "<f4", "|u1", "<i8".
  bool fortran_order = false;
  std::vector<int64_t> shape;  // () for a scalar.
  size_t data_offset = 0;      // Bytes before the data.
};

// Parses the header at the start of `bytes` (at least the whole header).
// INVALID_ARGUMENT naming `path` for a bad magic, version, length or dictionary.
absl::StatusOr<NpyHeader> ParseNpyHeader(const std::string& path, const std::string& bytes);

// Reads a features file and a labels file into a Dataset: features [N, ...] (the
// per-sample shape becomes sample_dims), labels [N], each label >= 0 and < 2^31.
absl::StatusOr<Dataset> ReadNpy(const std::string& features_path, const std::string& labels_path);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_NPY_H_
