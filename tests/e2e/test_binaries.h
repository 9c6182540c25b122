// Helpers of the end-to-end tests: a directory under TEST_TMPDIR, a file of the test's
// runfiles, and the three service binaries side by side as an installed release lays
// them out (what `tributary local --bin_dir` takes).
#ifndef TRIBUTARY_TESTS_E2E_TEST_BINARIES_H_
#define TRIBUTARY_TESTS_E2E_TEST_BINARIES_H_

#include <string>

namespace tributary::testing {

// $TEST_TMPDIR/<name>, created.
std::string TestDir(const std::string& name);

// The runfile at a workspace-relative path (e.g. "cli/tributary").
std::string Runfile(const std::string& path);

// A directory of symlinks to coordinator, parameter_server and worker.
std::string BinDir();

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_E2E_TEST_BINARIES_H_
