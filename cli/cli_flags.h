// The flags every verb of the `tributary` command line shares (cli_flags.cc), and
// the usage text.
#ifndef TRIBUTARY_CLI_CLI_FLAGS_H_
#define TRIBUTARY_CLI_CLI_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(std::string, reason);
ABSL_DECLARE_FLAG(std::string, job_id);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, out);

#endif  // TRIBUTARY_CLI_CLI_FLAGS_H_
