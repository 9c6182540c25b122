// `tributary spec [job flags]`: the JobSpec the flags describe, as proto3 JSON (what
// `submit` would send, before the coordinator's defaults), checked as the coordinator
// checks it. For --job_json, grpcurl's SubmitJob and the Python client.
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/job_progress.h"
#include "common/job_flags.h"
#include "common/job_spec.h"

namespace tributary::cli {

int RunSpec() {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(nullptr);
  if (!spec.ok()) return Fail(spec.status());
  if (absl::Status valid = ValidateJobSpec(WithDefaults(*spec)); !valid.ok()) return Fail(valid);
  std::cout << ToJson(*spec) << "\n";
  return 0;
}

}  // namespace tributary::cli
