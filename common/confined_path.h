// Paths a job names (data files, checkpoint directories) confined to a directory the
// operator configured (--data_root, --checkpoint_root): no ".." component, and after
// following symbolic links of every part that exists, the path lies in the root.
#ifndef TRIBUTARY_COMMON_CONFINED_PATH_H_
#define TRIBUTARY_COMMON_CONFINED_PATH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tributary {

// The real path of `path` (relative paths are taken from `base`), which may not exist
// yet: its deepest existing ancestor is resolved with realpath(3) and the rest
// appended. PERMISSION_DENIED naming `what`, the path, the root and `root_flag` when
// the path has a ".." component or resolves outside `root`; INVALID_ARGUMENT for an
// empty path or root. The root itself need not exist (it is then taken as written,
// made absolute from `base`).
absl::StatusOr<std::string> ConfinePath(absl::string_view what, absl::string_view path,
                                        absl::string_view base, absl::string_view root,
                                        absl::string_view root_flag);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CONFINED_PATH_H_
