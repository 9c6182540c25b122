#include "common/confined_path.h"

#include <limits.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tributary {
namespace {

// `path` made absolute from `base`, with "." parts and repeated slashes removed.
std::string Absolute(absl::string_view path, absl::string_view base) {
  std::string joined =
      absl::StartsWith(path, "/") ? std::string(path) : absl::StrCat(base, "/", path);
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(joined, '/', absl::SkipEmpty())) {
    if (part != ".") parts.emplace_back(part);
  }
  return "/" + absl::StrJoin(parts, "/");
}

// realpath(3) of the deepest existing ancestor of `absolute`, with the rest appended.
std::string Resolve(const std::string& absolute) {
  std::vector<std::string> rest;
  std::string prefix = absolute;
  while (true) {
    char resolved[PATH_MAX];
    if (realpath(prefix.c_str(), resolved) != nullptr) {
      std::string out = resolved;
      for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
        if (out != "/") out += "/";
        out += *it;
      }
      return out;
    }
    if (prefix == "/" || prefix.empty()) return absolute;
    const size_t slash = prefix.rfind('/');
    rest.push_back(prefix.substr(slash + 1));
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

bool Within(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || absl::StartsWith(path, root + "/");
}

}  // namespace

absl::StatusOr<std::string> ConfinePath(absl::string_view what, absl::string_view path,
                                        absl::string_view base, absl::string_view root,
                                        absl::string_view root_flag) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty path"));
  if (root.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "': no ", root_flag, " is configured"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::PermissionDeniedError(absl::StrCat(
          what, " '", path, "': '..' is not allowed (it must lie in ", root_flag, "=", root, ")"));
    }
  }
  const std::string real_root = Resolve(Absolute(root, base));
  const std::string real = Resolve(Absolute(path, base));
  if (!Within(real, real_root)) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " '", path, "' resolves to ", real, ", outside ", root_flag, "=", root));
  }
  return real;
}

}  // namespace tributary
