#include "bench/common/work_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tributary::bench {

absl::StatusOr<std::string> MakeWorkDir(const std::string& requested, const std::string& bench) {
  if (!requested.empty()) {
    std::error_code error;
    std::filesystem::create_directories(requested, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot create --work_dir ", requested, ": ", error.message()));
    }
    return requested;
  }
  std::string pattern = absl::StrCat("/tmp/tributary-", bench, "-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return std::string(buffer.data());
}

}  // namespace tributary::bench
