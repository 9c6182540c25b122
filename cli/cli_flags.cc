// The flags every verb of `tributary` shares (cli_flags.h).
#include "cli/cli_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051",
          "submit/status/pause/resume/stop/pull: coordinator address host:port. "
          "Default: 127.0.0.1:50051.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the coordinator's control token (sent as 'authorization: Bearer "
          "<token>' on submit/pause/resume/stop). Default: empty (none).");
ABSL_FLAG(std::string, role, "operator",
          "auth-header: the role whose credential to print: operator, worker, "
          "parameter_server or coordinator (the last three to call a service by hand as "
          "that component would). Default: operator.");
ABSL_FLAG(std::string, reason, "", "pause/resume/stop: reason kept in the job's event log.");
ABSL_FLAG(std::string, job_id, "",
          "pause/resume/stop/status/export: job id; empty = the active job (export: the "
          "active or else the latest one).");
ABSL_FLAG(bool, json, false, "status: print ClusterStatus as JSON instead of a summary.");
ABSL_FLAG(std::string, out, "",
          "pull: write the flat float32 parameters to this file. export: write the trained "
          "model to this TorchScript file (torch.jit.load reads it).");
