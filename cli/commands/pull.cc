// `tributary pull --out=FILE`: the current parameters from the PS shards.
#include <iostream>

#include "absl/flags/flag.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"
#include "cli/parameters.h"
#include "common/channel.h"
#include "common/cluster_auth.h"

namespace tributary::cli {

int RunPull() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("pull needs --out=FILE"));
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags();
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<PulledParameters> params =
      PullParameters(client->channel(), ChannelOptionsFromFlags(Role::kOperator));
  if (!params.ok()) return Fail(params.status());
  if (absl::Status written = WriteParameters(*params, out); !written.ok()) return Fail(written);
  std::cout << "wrote " << params->values.size() << " parameters of job " << params->job_id
            << " (step " << params->step << ") to " << out << "\n";
  return 0;
}

}  // namespace tributary::cli
