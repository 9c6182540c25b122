// The verbs of the `tributary` command line, one file each (cli/commands/<verb>.cc);
// cli/tributary_main.cc parses the flags and picks one. Each returns the process's
// exit code: 0 done, 1 failed (the reason on stderr), 2 a usage error, 130 interrupted.
#ifndef TRIBUTARY_CLI_COMMANDS_COMMANDS_H_
#define TRIBUTARY_CLI_COMMANDS_COMMANDS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cli/coordinator_client.h"
#include "common/shutdown.h"
#include "proto/job.pb.h"
#include "worker/engine/dataset.h"

namespace tributary::cli {

int RunSubmit();                                     // submit.cc
int RunSpec();                                       // spec.cc
int RunControl(CoordinatorClient::Control verb);     // control.cc: pause, resume, stop
int RunStatus();                                     // status.cc
int RunPull();                                       // pull.cc
int RunExport();                                     // export.cc
int RunAuthHeader();                                 // auth_header.cc
int RunLocal(const char* argv0, ShutdownSignal& shutdown);  // local.cc

// Prints "tributary: <status>" to stderr; 1.
int Fail(const absl::Status& status);
// The same for a flag that cannot be used (a bad --coordinator, an unreadable
// --token_file): 2.
int UsageError(const absl::Status& status);

// Loads --model_file with LibTorch (and, given its data, runs it on a few samples) so
// that a bad file is refused here, naming the problem. Without LibTorch in this build
// the workers are left to check it. (model_upload.cc)
absl::Status CheckModelFlag(const v1::JobSpec& spec,
                            const std::shared_ptr<const std::string>& bytes,
                            const engine::Dataset* train);
// Uploads the job's TorchScript file (checked before) and says so.
absl::Status UploadModel(CoordinatorClient& client, const v1::JobSpec& spec,
                         const std::string& bytes);

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_COMMANDS_COMMANDS_H_
