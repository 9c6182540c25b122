// Reading a model file (a TorchScript module) whole, with or without LibTorch: for
// the CLI's --model_file, train_local and the engine.
#ifndef TRIBUTARY_COMMON_MODEL_FILE_H_
#define TRIBUTARY_COMMON_MODEL_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tributary {

// Reads a model file whole. NOT_FOUND / INVALID_ARGUMENT naming the path for a missing
// file, a directory, an empty file or one larger than max_bytes.
absl::StatusOr<std::shared_ptr<const std::string>> ReadModelFile(const std::string& path,
                                                                 int64_t max_bytes);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_MODEL_FILE_H_
