// `tributary export --out=FILE.pt [--job_id]`: the trained model as TorchScript.
#include <iostream>

#include "absl/flags/flag.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"
#include "cli/model_files.h"

namespace tributary::cli {

int RunExport() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("export needs --out=FILE.pt"));
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags(/*control=*/false);
  if (!client.ok()) return UsageError(client.status());
  // The job (--job_id, else the active or latest one), its model and its partitions.
  absl::StatusOr<ExportResult> exported = ExportModel(
      client->channel(), client->channel_options(), absl::GetFlag(FLAGS_job_id), out);
  if (!exported.ok()) return Fail(exported.status());
  std::cout << "exported " << exported->model << " of job " << exported->job_id << " (step "
            << exported->step << ", " << exported->parameters << " values) to " << out << "\n";
  return 0;
}

}  // namespace tributary::cli
