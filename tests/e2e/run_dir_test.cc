// A `tributary local` run directory over several runs, with the real binaries: a run
// killed outright continues where its shards' last checkpoint stands when run again,
// a run stopped with Ctrl-C resumes from its final checkpoint, a job started from
// another's parameters begins at their loss, a directory in use is refused, and the
// local flags that used to be quietly replaced are honoured or refused before any
// process starts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tls.h"
#include "tests/e2e/local_run.h"
#include "tests/e2e/test_binaries.h"

namespace tributary::testing {
namespace {

// A synthetic job of `steps` steps, checkpointed every 100.
std::vector<std::string> SyntheticJob(int steps) {
  return {"--dataset=synthetic",
          "--synthetic_train=4000",
          "--synthetic_features=64",
          "--synthetic_classes=4",
          "--layers=64,32,4",
          "--batch=32",
          "--epochs=0",
          absl::StrCat("--max_steps=", steps),
          "--checkpoint_interval=100",
          "--eval_interval=400"};
}

std::string Log(const LocalRun& run, const std::string& attempt = "") {
  return ReadFileToString(run.dir + "/tributary" + attempt + ".log").value_or("");
}

std::string Field(const google::protobuf::Struct& json, const std::string& key) {
  auto found = json.fields().find(key);
  return found == json.fields().end() ? std::string() : found->second.string_value();
}

TEST(RunDirTest, AKilledRunContinuesItsJobWhenRunAgainInItsDirectory) {
  LocalRun first = StartLocal("killed_continues", SyntheticJob(3000));
  const std::string cluster = first.dir + "/cluster";
  std::string job_id;
  {
    auto stub = v1::Coordinator::NewStub(CoordinatorChannel(cluster, absl::Seconds(60)));
    const v1::Job running = WaitForJob(
        *stub, [](const v1::Job& job) { return job.state() == v1::RUNNING && job.step() >= 350; },
        absl::Minutes(2));
    ASSERT_GE(running.step(), 350u);
    job_id = running.job_id();
  }
  const std::vector<pid_t> pids = ChildPids(cluster);
  first.process->Signal(SIGKILL);
  first.process->Wait(absl::Seconds(10));
  ExpectNoChildLeft(cluster, pids, absl::Seconds(60));

  LocalRun second = StartLocal("killed_continues", SyntheticJob(3000), "-2");
  ASSERT_EQ(WaitForExit(second, absl::Minutes(3)), 0) << Log(second, "-2");
  const std::string log = Log(second, "-2");
  EXPECT_TRUE(absl::StrContains(log, "continuing job " + job_id)) << log;
  const google::protobuf::Struct summary = ReadJson(second.summary);
  EXPECT_EQ(Field(summary, "job_id"), job_id) << "the same job, not a new one";
  EXPECT_EQ(Field(summary, "state"), "COMPLETED");
  EXPECT_EQ(Number(summary, "steps"), 3000);
  // The shards came back from their checkpoint of the job (a multiple of 100, at least
  // the 300 the first run reached), not from step 0.
  const std::string shard_log = ReadFileToString(cluster + "/ps-0.log").value_or("");
  EXPECT_TRUE(absl::StrContains(shard_log, "restored job '" + job_id + "' at step "))
      << shard_log.substr(shard_log.size() > 3000 ? shard_log.size() - 3000 : 0);
  EXPECT_FALSE(absl::StrContains(shard_log, "restored job '" + job_id + "' at step 0,"));
}

// Both runs start from the same parameter file (--init_from): the second resumes the
// first job's checkpoint instead, and drops the file (a job takes one or the other).
TEST(RunDirTest, ARunStoppedWithCtrlCResumesFromItsFinalCheckpoint) {
  const std::string initial = TestDir("interrupted_initial") + "/initial.f32";
  {
    std::vector<float> values(64 * 32 + 32 + 32 * 4 + 4);  // The MLP 64-32-4.
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * std::sin(0.7f * i);
    std::ofstream(initial, std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()),
               static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  std::vector<std::string> flags = SyntheticJob(2500);
  flags.push_back("--init_from=" + initial);
  LocalRun first = StartLocal("interrupted_resumes", flags);
  const std::string cluster = first.dir + "/cluster";
  std::string job_id;
  uint64_t stopped_at = 0;
  {
    auto stub = v1::Coordinator::NewStub(CoordinatorChannel(cluster, absl::Seconds(60)));
    const v1::Job running = WaitForJob(
        *stub, [](const v1::Job& job) { return job.state() == v1::RUNNING && job.step() >= 200; },
        absl::Minutes(2));
    job_id = running.job_id();
  }
  first.process->Signal(SIGINT);
  ASSERT_EQ(WaitForExit(first, absl::Minutes(1)), 130);
  stopped_at = static_cast<uint64_t>(Number(ReadJson(first.summary), "steps"));
  ASSERT_GE(stopped_at, 200u);

  // The first run's port file would lead to its coordinator, which is gone.
  std::remove((cluster + "/coordinator.ports.json").c_str());
  LocalRun second = StartLocal("interrupted_resumes", flags, "-2");
  {
    // While it runs (the cluster goes when it ends): a new job whose first recorded
    // step is past the point where the first one stopped.
    auto stub = v1::Coordinator::NewStub(CoordinatorChannel(cluster, absl::Seconds(60)));
    const v1::Job resumed = WaitForJob(
        *stub,
        [&](const v1::Job& job) { return job.job_id() != job_id && job.progress_size() > 0; },
        absl::Minutes(2));
    ASSERT_GT(resumed.progress_size(), 0);
    EXPECT_EQ(resumed.spec().resume_from(), job_id);
    EXPECT_GE(resumed.progress(0).step(), stopped_at);
  }
  ASSERT_EQ(WaitForExit(second, absl::Minutes(3)), 0) << Log(second, "-2");
  EXPECT_TRUE(absl::StrContains(Log(second, "-2"), "resuming job " + job_id)) << Log(second, "-2");
  const google::protobuf::Struct summary = ReadJson(second.summary);
  EXPECT_EQ(Field(summary, "state"), "COMPLETED");
  EXPECT_EQ(Number(summary, "steps"), 2500);
  const google::protobuf::Struct& spec = summary.fields().at("job_spec").struct_value();
  EXPECT_EQ(Field(spec, "resume_from"), job_id);
  EXPECT_EQ(Field(spec, "init_from"), "");
}

TEST(RunDirTest, AJobStartedFromAnothersParametersBeginsAtTheirLoss) {
  const std::string params = TestDir("fine_tune") + "/trained.f32";
  LocalRun trained =
      StartLocal("trained_first", {"--dataset=synthetic", "--synthetic_train=4000",
                                   "--synthetic_features=64", "--synthetic_classes=4",
                                   "--layers=64,32,4", "--batch=32", "--epochs=0",
                                   "--max_steps=600", "--params_out=" + params});
  ASSERT_EQ(WaitForExit(trained, absl::Minutes(3)), 0) << Log(trained);
  const double trained_loss = Number(ReadJson(trained.summary), "final_loss");

  // The loss of the first step a job reports, read while it runs (slowly: a rate so
  // small that the hundreds of steps a loaded machine may run before the first report
  // still show where it began), then stopped.
  auto first_loss = [](const std::string& name, std::vector<std::string> flags) {
    LocalRun run = StartLocal(name, flags);
    auto stub =
        v1::Coordinator::NewStub(CoordinatorChannel(run.dir + "/cluster", absl::Seconds(60)));
    const v1::Job job = WaitForJob(
        *stub, [](const v1::Job& job) { return job.progress_size() > 0; }, absl::Minutes(2));
    EXPECT_TRUE(Control(*stub, "stop").ok());
    WaitForExit(run, absl::Minutes(1));
    return job.progress_size() > 0 ? static_cast<double>(job.progress(0).loss()) : NAN;
  };
  const std::vector<std::string> slow_job = {
      "--dataset=synthetic", "--synthetic_train=4000", "--synthetic_features=64",
      "--synthetic_classes=4", "--layers=64,32,4", "--batch=32", "--epochs=0",
      "--max_steps=100000", "--lr=0.00005", "--coordinator_arg=--heartbeat_interval=50ms"};
  std::vector<std::string> fine_tune = slow_job;
  fine_tune.push_back("--init_from=" + params);
  const double tuned_start = first_loss("fine_tuned", fine_tune);
  const double fresh_start = first_loss("from_scratch", slow_job);
  // The fresh job starts near ln(4) = 1.39; the fine-tuned one where the trained one
  // ended.
  EXPECT_GT(fresh_start, 1.0);
  EXPECT_LT(tuned_start, 0.5 * fresh_start);
  EXPECT_LT(std::abs(tuned_start - trained_loss), 0.5 * (fresh_start - trained_loss))
      << "trained to " << trained_loss << ", fine-tuning began at " << tuned_start;
}

TEST(RunDirTest, ARunDirectoryInUseIsRefused) {
  LocalRun first = StartLocal("locked", LongSyntheticJob());
  const std::string cluster = first.dir + "/cluster";
  auto stub = v1::Coordinator::NewStub(CoordinatorChannel(cluster, absl::Seconds(60)));
  WaitForJob(*stub, [](const v1::Job& job) { return job.state() == v1::RUNNING; },
             absl::Minutes(2));
  LocalRun second = StartLocal("locked", LongSyntheticJob(), "-2");
  EXPECT_EQ(WaitForExit(second, absl::Minutes(1)), 1);
  EXPECT_TRUE(absl::StrContains(Log(second, "-2"), "is in use by another tributary local run (pid " +
                                                       std::to_string(first.process->pid())))
      << Log(second, "-2");
  // The first run did not notice.
  EXPECT_EQ(WaitForJob(*stub, AnyState, absl::Seconds(5)).state(), v1::RUNNING);
  // `tributary status` counts the time the job has trained (it used to say 00:00).
  const int port = static_cast<int>(Number(ReadJson(cluster + "/coordinator.ports.json"),
                                           "grpc_port"));
  absl::StatusOr<std::unique_ptr<ChildProcess>> status = ChildProcess::Start(
      "tributary status",
      {Runfile("cli/tributary"), "status", absl::StrCat("--coordinator=127.0.0.1:", port),
       "--cluster_token_file=" + cluster + "/cluster.token"},
      first.dir + "/status.log");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE((*status)->Wait(absl::Seconds(30)));
  const std::string shown = ReadFileToString(first.dir + "/status.log").value_or("");
  EXPECT_TRUE(absl::StrContains(shown, "RUNNING")) << shown;
  EXPECT_FALSE(absl::StrContains(shown, "elapsed 00:00 ")) << shown;
  ASSERT_TRUE(Control(*stub, "stop").ok());
  WaitForExit(first, absl::Minutes(1));
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

TEST(RunDirTest, LocalFlagsAreHonouredOrRefusedBeforeAnythingStarts) {
  // The coordinator's dashboard port, as asked (it used to be replaced by a free one).
  const int port = FreePort();
  LocalRun run = StartLocal("http_port", {"--dataset=synthetic", "--synthetic_train=400",
                                          "--synthetic_features=16", "--layers=16,4",
                                          "--synthetic_classes=4", "--epochs=0", "--max_steps=20",
                                          absl::StrCat("--coordinator_arg=--http_port=", port)});
  ASSERT_EQ(WaitForExit(run, absl::Minutes(2)), 0) << Log(run);
  EXPECT_TRUE(absl::StrContains(Log(run), absl::StrCat("dashboard: http://127.0.0.1:", port, "/")))
      << Log(run);
  EXPECT_EQ(Number(ReadJson(run.dir + "/cluster/coordinator.ports.json"), "http_port"), port);

  // Refused at once, naming the flag, with no process started (no port files).
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  int index = 0;
  for (const Case& c :
       {Case{{"--job_devices=gpu", "--max_steps=5"}, "--job_devices=gpu needs GPU workers"},
        Case{{"--data_dir=/nonexistent/fashion", "--max_steps=5"}, "/nonexistent/fashion"},
        Case{{"--layers=100,10", "--max_steps=5"}, "784"},
        Case{{"--batch=0"}, "--batch=0"},
        Case{{"--epochs=0"}, "--max_steps must be given"}}) {
    LocalRun refused = StartLocal(absl::StrCat("refused_", index++), c.flags);
    EXPECT_NE(WaitForExit(refused, absl::Minutes(1)), 0);
    EXPECT_TRUE(absl::StrContains(Log(refused), c.expected)) << Log(refused);
    EXPECT_NE(access((refused.dir + "/cluster/coordinator.ports.json").c_str(), F_OK), 0)
        << "a process was started for " << c.flags[0];
  }
}

// A control call refused for want of the coordinator's control token says which flag
// gives it.
TEST(RunDirTest, AMissingControlTokenNamesTheFlagThatGivesIt) {
  const std::string token = TestDir("control_token") + "/control.token";
  std::ofstream(token) << "s3cret-control-token\n";
  std::vector<std::string> flags = LongSyntheticJob();
  flags.push_back("--coordinator_arg=--control_token_file=" + token);
  flags.push_back("--token_file=" + token);
  LocalRun run = StartLocal("control_token", flags);
  const std::string cluster = run.dir + "/cluster";
  auto stub = v1::Coordinator::NewStub(CoordinatorChannel(cluster, absl::Seconds(60)));
  WaitForJob(*stub, [](const v1::Job& job) { return job.state() == v1::RUNNING; },
             absl::Minutes(2));
  const int port =
      static_cast<int>(Number(ReadJson(cluster + "/coordinator.ports.json"), "grpc_port"));
  absl::StatusOr<std::unique_ptr<ChildProcess>> pause = ChildProcess::Start(
      "tributary pause",
      {Runfile("cli/tributary"), "pause", absl::StrCat("--coordinator=127.0.0.1:", port),
       "--cluster_token_file=" + cluster + "/cluster.token"},
      run.dir + "/pause.log");
  ASSERT_TRUE(pause.ok()) << pause.status();
  ASSERT_TRUE((*pause)->Wait(absl::Seconds(30)));
  EXPECT_EQ((*pause)->exit_code(), 1);
  const std::string said = ReadFileToString(run.dir + "/pause.log").value_or("");
  EXPECT_TRUE(absl::StrContains(said, "UNAUTHENTICATED")) << said;
  EXPECT_TRUE(absl::StrContains(said, "--token_file=FILE")) << said;
  EXPECT_EQ(WaitForJob(*stub, AnyState, absl::Seconds(5)).state(), v1::RUNNING);
  run.process->Signal(SIGINT);  // The launcher stops the job with its token.
  EXPECT_EQ(WaitForExit(run, absl::Minutes(1)), 130);
}

}  // namespace
}  // namespace tributary::testing
