#include "common/float_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tributary {

absl::StatusOr<std::vector<float>> ReadFloatFile(const std::string& path, uint64_t max_bytes) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(error));
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::NotFoundError(message);
  }
  if (!S_ISREG(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a file"));
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than the ", max_bytes, " allowed"));
  }
  if (size % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is not a whole number of float32 values"));
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values(size / sizeof(float));
  if (!in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(size))) {
    return absl::InternalError(absl::StrCat(path, ": read failed"));
  }
  return values;
}

absl::StatusOr<std::shared_ptr<const std::vector<float>>> CachedFloatFile::Read(
    const std::string& path, uint64_t max_bytes) {
  struct stat info;
  const std::string key =
      stat(path.c_str(), &info) == 0
          ? absl::StrCat(path, "|", info.st_dev, ":", info.st_ino, ":", info.st_size, ":",
                         info.st_mtim.tv_sec, ".", info.st_mtim.tv_nsec)
          : "";
  if (values_ != nullptr && !key.empty() && key == key_) return values_;
  absl::StatusOr<std::vector<float>> values = ReadFloatFile(path, max_bytes);
  if (!values.ok()) return values.status();
  values_ = std::make_shared<const std::vector<float>>(*std::move(values));
  key_ = key;
  return values_;
}

}  // namespace tributary
