// `tributary auth-header [--role]`: an x-tributary-auth value for grpcurl, from
// --cluster_token_file.
#include <iostream>

#include "absl/flags/flag.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"
#include "common/cluster_auth.h"

namespace tributary::cli {

int RunAuthHeader() {
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth = ClusterAuthFromFlags();
  if (!auth.ok()) {
    std::cerr << "tributary: " << auth.status().message() << "\n";
    return 2;
  }
  if (*auth == nullptr) {
    std::cerr << "tributary: auth-header needs --cluster_token_file\n";
    return 2;
  }
  const std::string role = absl::GetFlag(FLAGS_role);
  for (Role r : {Role::kOperator, Role::kWorker, Role::kParameterServer, Role::kCoordinator}) {
    if (role == RoleName(r)) {
      std::cout << (*auth)->HeaderFor(r) << "\n";
      return 0;
    }
  }
  std::cerr << "tributary: --role=" << role
            << ": not one of operator, worker, parameter_server, coordinator\n";
  return 2;
}

}  // namespace tributary::cli
