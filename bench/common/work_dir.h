// The directory a benchmark keeps its children's logs, port files and job spec in.
#ifndef TRIBUTARY_BENCH_COMMON_WORK_DIR_H_
#define TRIBUTARY_BENCH_COMMON_WORK_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace tributary::bench {

// `requested` (created when missing), or a new /tmp/tributary-<bench>-XXXXXX when it
// is empty. INTERNAL naming the directory when it cannot be created.
absl::StatusOr<std::string> MakeWorkDir(const std::string& requested, const std::string& bench);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_WORK_DIR_H_
