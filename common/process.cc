#include "common/process.h"

#include <glog/logging.h>

#include <cstdlib>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"

namespace tributary {

void ConfigureMutexChecks() {
  const char* under_test = std::getenv("TEST_TMPDIR");
  absl::SetMutexDeadlockDetectionMode(under_test != nullptr && under_test[0] != '\0'
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
}

std::vector<std::string> InitProcess(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  ConfigureMutexChecks();
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace tributary
