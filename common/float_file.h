// Flat float32 files (little-endian, no header): what `tributary pull --out`,
// `--params_out` and train_local --save_params write, and what JobSpec.init_from
// reads back.
#ifndef TRIBUTARY_COMMON_FLOAT_FILE_H_
#define TRIBUTARY_COMMON_FLOAT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tributary {

// Reads the whole file, refusing one larger than max_bytes before reading it.
// NOT_FOUND / PERMISSION_DENIED naming the path when it cannot be opened;
// INVALID_ARGUMENT naming the path and size when it is not whole float32 values, or
// is too large.
absl::StatusOr<std::vector<float>> ReadFloatFile(const std::string& path, uint64_t max_bytes);

// The last float file read, kept while it is the same file unchanged: Read() returns
// the kept values when `path` names the same device, inode, size and modification
// time, and reads it again otherwise (a file rewritten between two jobs is not
// served stale). Not thread-safe.
class CachedFloatFile {
 public:
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> Read(const std::string& path,
                                                                 uint64_t max_bytes);
  // Forgets the file read last.
  void Clear() {
    key_.clear();
    values_.reset();
  }

 private:
  std::string key_;  // path, device, inode, size and mtime of values_'s file.
  std::shared_ptr<const std::vector<float>> values_;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_FLOAT_FILE_H_
