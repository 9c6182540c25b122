// tributary: the command-line front end. The verbs are in cli/commands/, one file each:
//   tributary local  [job flags]  a whole cluster on loopback, trains, prints a summary
//   tributary submit [job flags]  submits a job to a running coordinator
//   tributary spec   [job flags]  the JobSpec the flags describe
//   tributary export --out=FILE   the trained model as a TorchScript file
//   tributary status | pause | resume | stop | pull   conveniences over the gRPC API
//   tributary show RUN_DIR        a finished run's dashboard (run_viewer.h)
#include <glog/logging.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/commands/commands.h"
#include "cli/run_viewer.h"
#include "common/cluster_auth.h"
#include "common/job_flags.h"
#include "common/process.h"
#include "common/shutdown.h"

namespace tributary::cli {
namespace {

constexpr char kUsage[] =
    "tributary: Tributary's command line.\n"
    "  tributary local  [job flags]   start a cluster on loopback and train (see --helpfull)\n"
    "  tributary submit [job flags]   submit a job to --coordinator\n"
    "  tributary spec [job flags]     print the JobSpec the job flags describe, as JSON\n"
    "  tributary status [--json]      the cluster and its job\n"
    "  tributary pause|resume|stop    control the active job (--reason)\n"
    "  tributary pull --out=FILE      the current parameters from the PS shards\n"
    "  tributary export --out=FILE    the trained model as TorchScript (--job_id)\n"
    "  tributary show RUN_DIR         the dashboard of a finished run, read-only\n"
    "  tributary auth-header          an x-tributary-auth value for grpcurl\n"
    "                                 (--cluster_token_file, --role)\n"
    "Job flags: --model, --layers, --dataset, --batch, --epochs, --optimizer, --lr, --mode,\n"
    "--replicas, ... (tributary --helpfull lists them all with their defaults).";

}  // namespace
}  // namespace tributary::cli

int main(int argc, char** argv) {
  tributary::RememberGivenFlags(argc, argv);
  std::vector<std::string> args = tributary::InitProcess(argc, argv, tributary::cli::kUsage);
  FLAGS_minloglevel = 1;  // The CLI speaks for itself; glog only for warnings.
  if (args.size() < 2) {
    std::cerr << tributary::cli::kUsage << "\n";
    return 2;
  }
  namespace cli = tributary::cli;
  using Control = cli::CoordinatorClient::Control;
  const std::string& command = args[1];
  if (command == "version") {
    std::cout << "tributary " << tributary::kVersion << "\n";
    return 0;
  }
  if (command == "local" || command == "show") {
    tributary::ShutdownSignal shutdown;
    return command == "local" ? cli::RunLocal(argv[0], shutdown) : cli::RunShow(args, shutdown);
  }
  if (command == "spec") return cli::RunSpec();
  // The operator's cluster credential (for pull, export and reads of the shards).
  absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
      tributary::ClusterAuthFromFlags();
  if (!auth.ok()) {
    std::cerr << "tributary: " << auth.status().message() << "\n";
    return 2;
  }
  if (command == "auth-header") return cli::RunAuthHeader();
  if (command == "submit") return cli::RunSubmit();
  if (command == "status") return cli::RunStatus();
  if (command == "pull") return cli::RunPull();
  if (command == "export") return cli::RunExport();
  if (command == "pause") return cli::RunControl(Control::kPause);
  if (command == "resume") return cli::RunControl(Control::kResume);
  if (command == "stop") return cli::RunControl(Control::kStop);
  std::cerr << "tributary: unknown command '" << command << "'\n" << cli::kUsage << "\n";
  return 2;
}
