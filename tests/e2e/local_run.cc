#include "tests/e2e/local_run.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/channel.h"
#include "common/cluster_auth.h"
#include "common/tls.h"
#include "tests/e2e/test_binaries.h"

namespace tributary::testing {


LocalRun StartLocal(const std::string& name, std::vector<std::string> job_flags,
                    const std::string& attempt) {
  LocalRun run;
  run.dir = TestDir(name);
  run.summary = run.dir + "/summary" + attempt + ".json";
  std::vector<std::string> argv = {
      Runfile("cli/tributary"),        "local",
      "--bin_dir=" + BinDir(),         "--run_dir=" + run.dir + "/cluster",
      "--summary_json=" + run.summary, "--coordinator_arg=--heartbeat_interval=200ms",
      "--progress_interval=0.2"};
  argv.insert(argv.end(), job_flags.begin(), job_flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start("tributary local", argv, run.dir + "/tributary" + attempt + ".log");
  EXPECT_TRUE(process.ok()) << process.status();
  if (process.ok()) run.process = *std::move(process);
  return run;
}

// Waits for the launcher to exit; its exit code, or -1 (with its log) when it did not.
int WaitForExit(LocalRun& run, absl::Duration timeout) {
  if (run.process == nullptr) return -1;
  if (!run.process->Wait(timeout)) {
    ADD_FAILURE() << "tributary local still running after " << absl::FormatDuration(timeout)
                  << ":\n"
                  << run.process->LogTail(30);
    run.process->Stop(absl::Seconds(10));
    return -1;
  }
  return run.process->exit_code();
}

google::protobuf::Struct ReadJson(const std::string& path) {
  google::protobuf::Struct json;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (text.ok()) {
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(*text, &json).ok()) << *text;
  }
  return json;
}

double Number(const google::protobuf::Struct& json, const std::string& key) {
  auto found = json.fields().find(key);
  EXPECT_NE(found, json.fields().end()) << "no '" << key << "' in the summary";
  return found == json.fields().end() ? NAN : found->second.number_value();
}

// The pids the cluster's children wrote into their port files.
std::vector<pid_t> ChildPids(const std::string& cluster_dir) {
  std::vector<pid_t> pids;
  for (const char* name :
       {"coordinator", "ps-0", "ps-1", "worker-0", "worker-1", "worker-2", "worker-3"}) {
    const std::string path = cluster_dir + "/" + name + ".ports.json";
    if (access(path.c_str(), R_OK) != 0) continue;
    pids.push_back(static_cast<pid_t>(Number(ReadJson(path), "pid")));
  }
  return pids;
}

// True while `pid` is a live process running one of our binaries (a reused pid runs
// something else; a zombie is dead).
bool StillOurs(pid_t pid, const std::string& cluster_dir) {
  absl::StatusOr<std::string> status = ReadFileToString(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok() || absl::StrContains(*status, "State:\tZ")) return false;
  absl::StatusOr<std::string> cmdline = ReadFileToString(absl::StrCat("/proc/", pid, "/cmdline"));
  return cmdline.ok() && absl::StrContains(*cmdline, cluster_dir);
}

// Every child of the cluster is gone within `timeout`; names the ones that are not.
void ExpectNoChildLeft(const std::string& cluster_dir, const std::vector<pid_t>& pids,
                       absl::Duration timeout) {
  ASSERT_FALSE(pids.empty()) << "no port files under " << cluster_dir;
  const absl::Time give_up = absl::Now() + timeout;
  std::vector<pid_t> alive;
  do {
    alive.clear();
    for (pid_t pid : pids) {
      if (StillOurs(pid, cluster_dir)) alive.push_back(pid);
    }
    if (alive.empty()) return;
    absl::SleepFor(absl::Milliseconds(100));
  } while (absl::Now() < give_up);
  std::string names;
  for (pid_t pid : alive) absl::StrAppend(&names, " ", pid);
  ADD_FAILURE() << "children still running after " << absl::FormatDuration(timeout) << ":" << names;
  for (pid_t pid : alive) kill(pid, SIGKILL);
}

std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& cluster_dir,
                                                  absl::Duration timeout) {
  const std::string path = cluster_dir + "/coordinator.ports.json";
  const absl::Time give_up = absl::Now() + timeout;
  while (access(path.c_str(), R_OK) != 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const int port = static_cast<int>(Number(ReadJson(path), "grpc_port"));
  // As the operator, with the secret `tributary local` made (ListWorkers needs it) and
  // the run's control token (pause, resume and stop need it).
  absl::StatusOr<ChannelOptions> options =
      ChannelOptionsFromTokenFile(cluster_dir + "/cluster.token", Role::kOperator);
  EXPECT_TRUE(options.ok()) << options.status();
  ChannelOptions operator_options = options.value_or(ChannelOptions());
  absl::StatusOr<std::string> token = ReadFileToString(cluster_dir + "/control.token");
  EXPECT_TRUE(token.ok()) << token.status();
  operator_options.bearer_token = token.value_or("");
  return *MakeChannel(absl::StrCat("127.0.0.1:", port), operator_options);
}

// Polls the active job until `done` holds; the last job seen either way.
v1::Job WaitForJob(v1::Coordinator::Stub& stub, const std::function<bool(const v1::Job&)>& done,
                   absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  v1::Job job;
  while (absl::Now() < give_up) {
    v1::GetJobRequest request;  // Empty id: the active (or latest) job.
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (stub.GetJob(&context, request, &job).ok() && done(job)) return job;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ADD_FAILURE() << "job still " << v1::JobState_Name(job.state()) << " at step " << job.step()
                << " after " << absl::FormatDuration(timeout) << ": " << job.state_reason();
  return job;
}

bool AnyState(const v1::Job&) { return true; }

grpc::Status Control(v1::Coordinator::Stub& stub, const std::string& verb) {
  v1::JobControlRequest request;
  request.set_reason("local_cli_test: " + verb);
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (verb == "pause") return stub.PauseJob(&context, request, &job);
  if (verb == "resume") return stub.ResumeJob(&context, request, &job);
  return stub.StopJob(&context, request, &job);
}

// A synthetic job long enough to be controlled while it runs.
std::vector<std::string> LongSyntheticJob() {
  return {"--dataset=synthetic",
          "--synthetic_train=4000",
          "--synthetic_features=64",
          "--synthetic_classes=4",
          "--layers=64,32,4",
          "--batch=32",
          "--epochs=0",
          "--max_steps=100000000"};
}

}  // namespace tributary::testing
