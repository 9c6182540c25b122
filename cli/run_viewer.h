// Looking at a run afterwards: `tributary show RUN_DIR` serves the dashboard of a
// finished run read-only from the files its coordinator kept (the state file with the
// jobs, their events and results, and one history file per job), and
// `tributary local --keep_dashboard` does the same on the run's own dashboard port once
// its job has ended, so the page the user has open keeps working until Ctrl-C.
#ifndef TRIBUTARY_CLI_RUN_VIEWER_H_
#define TRIBUTARY_CLI_RUN_VIEWER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shutdown.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/coordinator_state.pb.h"
#include "services/coordinator/dashboard.h"

namespace tributary::cli {

// The coordinator's state directory of a run: <run_dir>/coordinator-state (what
// `tributary local` makes), or `run_dir` itself when it holds the state file (a
// coordinator's --state_dir). NOT_FOUND naming the directory otherwise.
absl::StatusOr<std::string> StateDirOf(const std::string& run_dir);

// A run's jobs and histories, read from its files (again whenever the state file
// changed, so a run still going shows its progress too). Thread-safe.
class RunViewer {
 public:
  static absl::StatusOr<std::unique_ptr<RunViewer>> Open(const std::string& run_dir);

  const std::string& run_dir() const { return run_dir_; }
  const std::string& state_dir() const { return state_dir_; }

  // What the dashboard's routes serve. The status has the latest job (or the one still
  // active when the run was cut short), no workers or shards, and read_only_run_dir set.
  coordinator::DashboardData Data();

  v1::ClusterStatus Status();
  v1::ListJobsResponse Jobs();
  absl::StatusOr<v1::Job> Job(const std::string& job_id);
  // A job without a history file (it never ran a step) has an empty history.
  absl::StatusOr<v1::JobHistory> History(const std::string& job_id);

 private:
  RunViewer(std::string run_dir, std::string state_dir);
  // The state file as it is now (re-read when its size or time changed); the previous
  // version when the current one is torn.
  absl::StatusOr<coordinator::CoordinatorState> State();

  const std::string run_dir_;
  const std::string state_dir_;
  absl::Mutex mu_;
  coordinator::CoordinatorState state_ ABSL_GUARDED_BY(mu_);
  int64_t state_mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  off_t state_size_ ABSL_GUARDED_BY(mu_) = -1;
};

// Serves `viewer`'s dashboard on host:port (0 picks a free port) until `shutdown`;
// `ready` gets the URL once it serves. UNAVAILABLE when the port cannot be bound.
absl::Status ServeRun(RunViewer& viewer, const std::string& host, int port,
                      ShutdownSignal& shutdown,
                      const std::function<void(const std::string&)>& ready);

// `tributary show RUN_DIR [--show_port=N] [--show_host=H]`: exit code 0 after Ctrl-C,
// 1 when the run cannot be read or the port bound, 2 without a RUN_DIR.
int RunShow(const std::vector<std::string>& args, ShutdownSignal& shutdown);

// --keep_dashboard: after `tributary local`'s job ended and its cluster stopped, serves
// the run read-only on the coordinator's dashboard port (the same URL) until Ctrl-C.
bool KeepDashboardRequested();
absl::Status KeepDashboard(const std::string& run_dir, int port, ShutdownSignal& shutdown);

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_RUN_VIEWER_H_
