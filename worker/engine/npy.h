// NumPy's .npy files (format versions 1.0, 2.0 and 3.0), the common way to bring
// arrays out of Python: `np.save("train_x.npy", x)`. Features keep their dtype and
// per-sample shape: float32 and float64 (as float32) stay float; int64, int32, int16,
// uint16, uint8 and bool become int64, never scaled. Labels: integers of shape
// (samples,) are class ids; integers of any other per-sample shape are int64 targets
// (sequences), floats of any shape float32 targets (regression). Every problem is an
// error naming the file.
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

// What OpenNpy found: the header and the element size, the data checked to be there.
struct NpyLayout {
  NpyHeader header;
  int element_bytes = 0;
};

// Reads and checks a file's header against its size (the data is not read).
absl::StatusOr<NpyLayout> ReadNpyLayout(const std::string& path);

// "(3, 4)", as NumPy writes a shape.
std::string NpyShapeText(const std::vector<int64_t>& shape);

// Reads a features file and a labels file into a Dataset: features [N, ...] (the
// per-sample shape becomes sample_dims); labels [N] class ids (each >= 0 and < 2^31),
// or targets [N, ...] (target_dims).
absl::StatusOr<Dataset> ReadNpy(const std::string& features_path, const std::string& labels_path);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_NPY_H_
