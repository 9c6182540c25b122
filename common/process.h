// Start-up shared by every binary: flags, logging, crash traces, version.
#ifndef TRIBUTARY_COMMON_PROCESS_H_
#define TRIBUTARY_COMMON_PROCESS_H_

#include <string>
#include <vector>

namespace tributary {

inline constexpr char kVersion[] = "0.1.0";

// Parses absl flags (exits with usage on a bad flag), sends glog to stderr, installs
// glog's crash handler and ConfigureMutexChecks(). Returns the positional arguments
// (argv[0] first).
std::vector<std::string> InitProcess(int argc, char** argv, const char* usage);

// Debian's Abseil is built without NDEBUG, so by default every Mutex::Lock also updates a
// process-wide lock-order graph under one global lock, and a lock-order inversion aborts
// the process ("potential deadlock") even where no deadlock can happen. A service turns
// that off (a lock and unlock pair: ~48 ns with it, ~13 ns without); under `bazel test`
// (TEST_TMPDIR set, which the multi-process tests' binaries inherit) it stays on and
// aborting, so the tests still catch an inversion.
void ConfigureMutexChecks();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PROCESS_H_
