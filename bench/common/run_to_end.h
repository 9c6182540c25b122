// Runs a helper program of a benchmark (a Python reference, a data converter) to its
// end, with its output in a log file.
#ifndef TRIBUTARY_BENCH_COMMON_RUN_TO_END_H_
#define TRIBUTARY_BENCH_COMMON_RUN_TO_END_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tributary::bench {

// Runs `argv` (argv[0] a path) to its end with stdout and stderr in log_path (emptied
// first); its exit code, or the error of starting it. Sets *seconds (may be null) to
// its wall time.
absl::StatusOr<int> RunToEnd(const std::string& name, const std::vector<std::string>& argv,
                             const std::string& log_path, double* seconds = nullptr);

// The last non-empty line of a file ("" when it cannot be read): a program's last word.
std::string LastLine(const std::string& path);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_RUN_TO_END_H_
