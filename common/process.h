// Start-up shared by every binary: flags, logging, crash traces, version.
#ifndef TRIBUTARY_COMMON_PROCESS_H_
#define TRIBUTARY_COMMON_PROCESS_H_

#include <string>
#include <vector>

namespace tributary {

inline constexpr char kVersion[] = "0.1.0";

// Parses absl flags (exits with usage on a bad flag), sends glog to stderr and installs
// glog's crash handler. Returns the positional arguments (argv[0] first).
std::vector<std::string> InitProcess(int argc, char** argv, const char* usage);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PROCESS_H_
