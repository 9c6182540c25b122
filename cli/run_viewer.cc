#include "cli/run_viewer.h"

#include <prometheus/registry.h>
#include <sys/stat.h>

#include <iostream>
#include <memory>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http_server.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/proto_time.h"
#include "services/coordinator/history_file.h"
#include "services/coordinator/state_file.h"

ABSL_FLAG(int, show_port, 0,
          "show: HTTP port of the read-only dashboard; 0 picks a free one (printed). "
          "Default: 0.");
ABSL_FLAG(std::string, show_host, "127.0.0.1",
          "show: address the read-only dashboard listens on (0.0.0.0 for every interface). "
          "Default: 127.0.0.1.");
ABSL_FLAG(bool, keep_dashboard, false,
          "local: once the job has ended and the cluster stopped, keep serving the run's "
          "dashboard read-only from the run directory on the same URL until Ctrl-C (as "
          "`tributary show` does). Default: false.");

namespace tributary::cli {
namespace {

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

absl::StatusOr<std::string> StateDirOf(const std::string& run_dir) {
  for (const std::string& dir : {run_dir + "/coordinator-state", run_dir}) {
    if (IsFile(dir + "/coordinator_state.json") || IsFile(dir + "/coordinator_state.prev.json")) {
      return dir;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      run_dir,
      " holds no coordinator state (no coordinator-state/coordinator_state.json): "
      "give the --run_dir of a `tributary local` run, or a coordinator's --state_dir"));
}

RunViewer::RunViewer(std::string run_dir, std::string state_dir)
    : run_dir_(std::move(run_dir)), state_dir_(std::move(state_dir)) {}

absl::StatusOr<std::unique_ptr<RunViewer>> RunViewer::Open(const std::string& run_dir) {
  absl::StatusOr<std::string> state_dir = StateDirOf(run_dir);
  if (!state_dir.ok()) return state_dir.status();
  std::unique_ptr<RunViewer> viewer(new RunViewer(run_dir, *state_dir));
  absl::StatusOr<coordinator::CoordinatorState> state = viewer->State();
  if (!state.ok()) return state.status();
  return viewer;
}

absl::StatusOr<coordinator::CoordinatorState> RunViewer::State() {
  coordinator::StateFile file(state_dir_);
  struct stat info;
  const bool current = stat(file.path().c_str(), &info) == 0;
  absl::MutexLock lock(&mu_);
  if (current && state_size_ == info.st_size &&
      state_mtime_ns_ == info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec) {
    return state_;
  }
  // Read only: a torn current file is left where it is (the coordinator's Load would
  // move it aside), and its previous version is shown.
  std::string problems;
  for (const std::string& path : {file.path(), file.previous_path()}) {
    absl::StatusOr<std::optional<std::string>> bytes = coordinator::ReadFileIfExists(path);
    if (!bytes.ok() || !bytes->has_value()) continue;
    absl::StatusOr<coordinator::CoordinatorState> decoded =
        coordinator::StateFile::Decode(path, **bytes);
    if (!decoded.ok()) {
      absl::StrAppend(&problems, problems.empty() ? "" : "; ", decoded.status().message());
      continue;
    }
    state_ = *std::move(decoded);
    state_size_ = current ? info.st_size : -1;
    state_mtime_ns_ = current ? info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec : -1;
    return state_;
  }
  return absl::DataLossError(absl::StrCat("cannot read the run's state in ", state_dir_, ": ",
                                          problems.empty() ? "no state file" : problems));
}

v1::ClusterStatus RunViewer::Status() {
  v1::ClusterStatus status;
  *status.mutable_now() = ToProto(absl::Now());
  status.set_coordinator_version(absl::StrCat(kVersion, " (tributary show)"));
  status.set_read_only_run_dir(run_dir_);
  absl::StatusOr<coordinator::CoordinatorState> state = State();
  if (!state.ok()) {
    status.set_waiting_reason(std::string(state.status().message()));
    return status;
  }
  // As the coordinator shows it: the active job (a run cut short), else the newest.
  const v1::Job* shown = nullptr;
  for (const v1::Job& job : state->jobs()) {
    if (!IsTerminal(job.state()) || shown == nullptr || IsTerminal(shown->state())) shown = &job;
  }
  if (shown != nullptr) *status.mutable_job() = *shown;
  status.set_expected_shards(static_cast<uint32_t>(state->shards_size()));
  return status;
}

v1::ListJobsResponse RunViewer::Jobs() {
  v1::ListJobsResponse list;
  absl::StatusOr<coordinator::CoordinatorState> state = State();
  if (!state.ok()) return list;
  for (auto it = state->jobs().rbegin(); it != state->jobs().rend(); ++it) {
    v1::Job* job = list.add_jobs();
    *job = *it;
    job->clear_progress();
  }
  return list;
}

absl::StatusOr<v1::Job> RunViewer::Job(const std::string& job_id) {
  absl::StatusOr<coordinator::CoordinatorState> state = State();
  if (!state.ok()) return state.status();
  for (const v1::Job& job : state->jobs()) {
    if (job.job_id() == job_id) return job;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown job id '", job_id, "': the run in ", run_dir_, " has no such job"));
}

absl::StatusOr<v1::JobHistory> RunViewer::History(const std::string& job_id) {
  absl::StatusOr<v1::Job> job = Job(job_id);
  if (!job.ok()) return job.status();
  absl::StatusOr<v1::JobHistory> history = coordinator::LoadHistoryFile(state_dir_, job_id);
  if (absl::IsNotFound(history.status())) {
    v1::JobHistory empty;
    empty.set_job_id(job_id);
    return empty;
  }
  return history;
}

coordinator::DashboardData RunViewer::Data() {
  coordinator::DashboardData data;
  data.status = [this] { return Status(); };
  data.jobs = [this] { return Jobs(); };
  data.job = [this](const std::string& job_id) { return Job(job_id); };
  data.history = [this](const std::string& job_id) { return History(job_id); };
  return data;
}

absl::Status ServeRun(RunViewer& viewer, const std::string& host, int port,
                      ShutdownSignal& shutdown,
                      const std::function<void(const std::string&)>& ready) {
  HttpServer http(std::make_shared<prometheus::Registry>(), [] { return true; });
  coordinator::AddDashboardRoutes(http, viewer.Data());
  if (absl::Status started = http.Start(host, port); !started.ok()) return started;
  ready(absl::StrCat("http://", host == "0.0.0.0" ? "127.0.0.1" : host, ":", http.port(), "/"));
  shutdown.Wait();
  http.Stop();
  return absl::OkStatus();
}

int RunShow(const std::vector<std::string>& args, ShutdownSignal& shutdown) {
  if (args.size() != 3) {
    std::cerr << "usage: tributary show RUN_DIR [--show_port=N] [--show_host=ADDRESS]\n"
                 "  RUN_DIR: the --run_dir of a tributary local run (or a coordinator's "
                 "--state_dir)\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(args[2]);
  if (!viewer.ok()) {
    std::cerr << "tributary show: " << viewer.status().message() << "\n";
    return 1;
  }
  const v1::ListJobsResponse jobs = (*viewer)->Jobs();
  absl::Status served =
      ServeRun(**viewer, absl::GetFlag(FLAGS_show_host), absl::GetFlag(FLAGS_show_port), shutdown,
               [&](const std::string& url) {
                 std::cout << "run " << args[2] << ": " << jobs.jobs_size() << " job(s)";
                 if (jobs.jobs_size() > 0) {
                   const v1::Job& latest = jobs.jobs(0);
                   std::cout << ", latest " << latest.job_id() << " "
                             << v1::JobState_Name(latest.state()) << " at step " << latest.step();
                 }
                 std::cout << "\ndashboard (read-only): " << url << "\nCtrl-C to stop" << std::endl;
               });
  if (!served.ok()) {
    std::cerr << "tributary show: " << served.message() << "\n";
    return 1;
  }
  return 0;
}

bool KeepDashboardRequested() { return absl::GetFlag(FLAGS_keep_dashboard); }

absl::Status KeepDashboard(const std::string& run_dir, int port, ShutdownSignal& shutdown) {
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(run_dir);
  if (!viewer.ok()) return viewer.status();
  // The coordinator has just let go of the port.
  absl::Status served;
  for (int attempt = 0; attempt < 20; ++attempt) {
    served = ServeRun(**viewer, "127.0.0.1", port, shutdown, [](const std::string& url) {
      std::cout << "dashboard of the finished run (read-only): " << url << " - Ctrl-C to stop"
                << std::endl;
    });
    if (!absl::IsUnavailable(served) || shutdown.requested()) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  return served;
}

}  // namespace tributary::cli
