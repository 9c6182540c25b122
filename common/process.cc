#include "common/process.h"

#include <glog/logging.h>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

namespace tributary {

std::vector<std::string> InitProcess(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace tributary
