#include "tests/e2e/test_binaries.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace tributary::testing {

using bazel::tools::cpp::runfiles::Runfiles;

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string Runfile(const std::string& path) {
  static Runfiles* runfiles = [] {
    std::string error;
    Runfiles* created = Runfiles::CreateForTest(&error);
    EXPECT_NE(created, nullptr) << error;
    return created;
  }();
  return runfiles->Rlocation("tributary/" + path);
}

std::string BinDir() {
  static const std::string dir = [] {
    const std::string bin = TestDir("bin");
    for (const char* path : {"services/coordinator/coordinator",
                             "services/parameter_server/parameter_server", "worker/worker"}) {
      const std::string target = Runfile(path);
      const std::string link = bin + std::string(path).substr(std::string(path).rfind('/'));
      EXPECT_EQ(symlink(target.c_str(), link.c_str()), 0) << link << " -> " << target;
    }
    return bin;
  }();
  return dir;
}

}  // namespace tributary::testing
