#include "common/model_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace tributary {

absl::StatusOr<std::shared_ptr<const std::string>> ReadModelFile(const std::string& path,
                                                                 int64_t max_bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("model file ", path, ": cannot read it: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", path, ": not a regular file"));
  }
  if (st.st_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", path, ": empty"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("model file ", path, ": ", st.st_size,
                                                   " bytes, more than the limit of ", max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::string>(std::istreambuf_iterator<char>(in),
                                             std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return absl::DataLossError(absl::StrCat("model file ", path, ": read failed"));
  }
  if (static_cast<int64_t>(bytes->size()) != st.st_size) {
    return absl::DataLossError(
        absl::StrCat("model file ", path, ": read ", bytes->size(), " of ", st.st_size, " bytes"));
  }
  return std::shared_ptr<const std::string>(std::move(bytes));
}

}  // namespace tributary
