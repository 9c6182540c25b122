// Flat float32 files (little-endian, no header): what `tributary pull --out`,
// `--params_out` and train_local --save_params write, and what JobSpec.init_from
// reads back.
#ifndef TRIBUTARY_COMMON_FLOAT_FILE_H_
#define TRIBUTARY_COMMON_FLOAT_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tributary {

// Reads the whole file, refusing one larger than max_bytes before reading it.
// NOT_FOUND / PERMISSION_DENIED naming the path when it cannot be opened;
// INVALID_ARGUMENT naming the path and size when it is not whole float32 values, or
// is too large.
absl::StatusOr<std::vector<float>> ReadFloatFile(const std::string& path, uint64_t max_bytes);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_FLOAT_FILE_H_
