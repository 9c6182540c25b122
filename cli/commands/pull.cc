// `tributary pull --out=FILE`: the current parameters from the PS shards.
#include <iostream>

#include "absl/flags/flag.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"
#include "cli/parameters.h"

namespace tributary::cli {

int RunPull() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("pull needs --out=FILE"));
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags(/*control=*/false);
  if (!client.ok()) return UsageError(client.status());
  // Every partition of the active (or latest) job, from the shards the coordinator names.
  absl::StatusOr<PulledParameters> params =
      PullParameters(client->channel(), client->channel_options());
  absl::Status written = params.ok() ? WriteParameters(*params, out) : params.status();
  if (!written.ok()) return Fail(written);
  std::cout << "wrote " << params->values.size() << " parameters of job " << params->job_id
            << " (step " << params->step << ") to " << out << "\n";
  return 0;
}

}  // namespace tributary::cli
