#include "common/process.h"

#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace tributary {
namespace {

// Takes two fresh locks in both orders: a potential deadlock, never a real one.
void InvertLockOrder() {
  absl::Mutex a, b;
  { absl::MutexLock la(&a); absl::MutexLock lb(&b); }
  { absl::MutexLock lb(&b); absl::MutexLock la(&a); }
}

class MutexChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    saved_ = dir != nullptr ? dir : "";
  }
  void TearDown() override {
    setenv("TEST_TMPDIR", saved_.c_str(), 1);
    ConfigureMutexChecks();
  }
  std::string saved_;
};

TEST_F(MutexChecksTest, AServiceIgnoresALockOrderInversion) {
  unsetenv("TEST_TMPDIR");
  ConfigureMutexChecks();
  InvertLockOrder();  // Would abort with the detector on.
  SUCCEED();
}

TEST_F(MutexChecksTest, UnderBazelTestAnInversionStillAborts) {
  setenv("TEST_TMPDIR", "/tmp", 1);
  ConfigureMutexChecks();
  EXPECT_DEATH(InvertLockOrder(), "potential deadlock");
}

}  // namespace
}  // namespace tributary
