// A run looked at afterwards, end to end on the real binaries: `tributary local` trains a
// 400-step job that evaluates every 50 steps, exits, and leaves in its run directory the
// job's complete per-step history (a point per step with both workers' reports, every
// evaluation, each worker's timeline, the job's own PS traffic); `tributary show
// RUN_DIR` serves it read-only, and headless Chromium renders that dashboard with as
// many points per chart as the history holds and the accuracy on a 0-1 axis. With
// --keep_dashboard the local dashboard itself stays up after the job, read-only.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/child_process.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/coordinator_state.pb.h"
#include "services/coordinator/history_file.h"
#include "services/coordinator/state_file.h"
#include "tests/coordinator/command.h"
#include "tests/e2e/test_binaries.h"

namespace tributary::testing {
namespace {

constexpr uint64_t kSteps = 400;
constexpr uint64_t kEvalInterval = 50;
// The model 784-64-10: its parameters, and what one node pushes per step (float32).
constexpr uint64_t kParameters = 784 * 64 + 64 + 64 * 10 + 10;
constexpr uint64_t kWorkers = 2;

class RunHistoryTest : public ::testing::Test {
 protected:
  // One run for every test: `tributary local` to completion.
  static void SetUpTestSuite() {
    dir_ = new std::string(TestDir("history"));
    run_dir_ = new std::string(*dir_ + "/run");
    const std::vector<std::string> argv = {
        Runfile("cli/tributary"),
        "local",
        "--bin_dir=" + BinDir(),
        "--run_dir=" + *run_dir_,
        "--coordinator_arg=--heartbeat_interval=200ms",
        "--progress_interval=0.2",
        "--dataset=synthetic",
        "--layers=784,64,10",
        "--batch=64",
        absl::StrCat("--max_steps=", kSteps),
        "--epochs=0",
        absl::StrCat("--eval_interval=", kEvalInterval),
        absl::StrCat("--workers=", kWorkers),
        "--replicas=1",
        "--oversubscribe",
    };
    absl::StatusOr<std::unique_ptr<ChildProcess>> local =
        ChildProcess::Start("tributary local", argv, *dir_ + "/local.log");
    ASSERT_TRUE(local.ok()) << local.status();
    ASSERT_TRUE((*local)->Wait(absl::Minutes(5))) << (*local)->LogTail(30);
    ASSERT_EQ((*local)->exit_code(), 0) << (*local)->LogTail(30);
    local_log_ = new std::string(ReadAll(*dir_ + "/local.log"));
  }

  static std::string StateDir() { return *run_dir_ + "/coordinator-state"; }

  // The run's only job, from the state file the coordinator left.
  static v1::Job TheJob() {
    const std::string path = StateDir() + "/coordinator_state.json";
    absl::StatusOr<coordinator::CoordinatorState> state =
        coordinator::StateFile::Decode(path, ReadAll(path));
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok() || state->jobs_size() != 1) return v1::Job();
    return state->jobs(0);
  }

  static std::string* dir_;
  static std::string* run_dir_;
  static std::string* local_log_;
};

std::string* RunHistoryTest::dir_ = nullptr;
std::string* RunHistoryTest::run_dir_ = nullptr;
std::string* RunHistoryTest::local_log_ = nullptr;

TEST_F(RunHistoryTest, TheRunDirKeepsTheJobsCompleteHistory) {
  const v1::Job job = TheJob();
  ASSERT_EQ(job.state(), v1::COMPLETED) << job.state_reason();
  EXPECT_NE(local_log_->find("tributary show " + *run_dir_), std::string::npos)
      << "the launcher says how to look at the run again:\n"
      << *local_log_;
  absl::StatusOr<v1::JobHistory> history = coordinator::LoadHistoryFile(StateDir(), job.job_id());
  ASSERT_TRUE(history.ok()) << history.status();

  // A point per step, each from both workers' reports.
  ASSERT_EQ(history->steps_size(), static_cast<int>(kSteps));
  EXPECT_EQ(history->steps_recorded(), kSteps);
  for (int i = 0; i < history->steps_size(); ++i) {
    const v1::StepPoint& point = history->steps(i);
    ASSERT_EQ(point.step(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(point.workers(), kWorkers) << "step " << point.step();
    EXPECT_GT(point.samples_per_second(), 0) << "step " << point.step();
    EXPECT_GT(point.step_seconds(), 0) << "step " << point.step();
    EXPECT_FALSE(point.slowest_worker().empty());
  }
  EXPECT_LT(history->steps(kSteps - 1).loss(), history->steps(0).loss()) << "it learned";
  // Every evaluation: after each 50 steps (the last one is step 400 too).
  ASSERT_EQ(history->evaluations_size(), static_cast<int>(kSteps / kEvalInterval));
  for (int i = 0; i < history->evaluations_size(); ++i) {
    EXPECT_EQ(history->evaluations(i).step(), kEvalInterval * (i + 1));
    EXPECT_GE(history->evaluations(i).test_accuracy(), 0);
    EXPECT_LE(history->evaluations(i).test_accuracy(), 1);
  }
  EXPECT_FLOAT_EQ(history->evaluations(history->evaluations_size() - 1).test_accuracy(),
                  job.result().test_accuracy());
  // Each worker's timeline, a point per step.
  ASSERT_EQ(history->workers_size(), static_cast<int>(kWorkers));
  for (const v1::WorkerTimeline& worker : history->workers()) {
    EXPECT_EQ(worker.steps(), kSteps) << worker.worker_id();
    EXPECT_EQ(worker.points_size(), static_cast<int>(kSteps)) << worker.worker_id();
    EXPECT_GT(worker.total_step_seconds(), 0);
  }
  // The job's own PS traffic: every step each node pushed every parameter once.
  EXPECT_EQ(history->bytes_pushed(), kSteps * kWorkers * kParameters * 4);
  EXPECT_EQ(job.result().bytes_pushed(), history->bytes_pushed());
  EXPECT_GE(job.result().bytes_pulled(), job.result().bytes_pushed())
      << "every step's update came back, and the first pull";
}

// Reads a child's log until it holds `pattern`'s first group.
std::string AwaitInLog(ChildProcess& child, const std::string& log, const std::regex& pattern) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  std::smatch match;
  while (absl::Now() < give_up && child.Running()) {
    const std::string text = ReadAll(log);
    if (std::regex_search(text, match, pattern)) return match[1];
    absl::SleepFor(absl::Milliseconds(50));
  }
  return "";
}

TEST_F(RunHistoryTest, TributaryShowServesTheFinishedRunsHistoryAndChromiumDrawsAllOfIt) {
  const v1::Job job = TheJob();
  ASSERT_FALSE(job.job_id().empty());
  absl::StatusOr<v1::JobHistory> file = coordinator::LoadHistoryFile(StateDir(), job.job_id());
  ASSERT_TRUE(file.ok()) << file.status();

  const std::string log = *dir_ + "/show.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> show = ChildProcess::Start(
      "tributary show", {Runfile("cli/tributary"), "show", *run_dir_, "--show_port=0"}, log);
  ASSERT_TRUE(show.ok()) << show.status();
  const std::string port =
      AwaitInLog(**show, log, std::regex(R"(dashboard \(read-only\): http://127\.0\.0\.1:(\d+)/)"));
  ASSERT_FALSE(port.empty()) << ReadAll(log);

  // The history over the dashboard's JSON API: the file, complete.
  httplib::Client http("127.0.0.1", std::stoi(port));
  auto served = http.Get(absl::StrCat("/api/v1/jobs/", job.job_id(), "/history"));
  ASSERT_TRUE(served);
  ASSERT_EQ(served->status, 200) << served->body;
  v1::JobHistory history;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(served->body, &history).ok());
  EXPECT_EQ(history.SerializeAsString(), file->SerializeAsString());
  auto status = http.Get("/api/v1/status");
  ASSERT_TRUE(status);
  EXPECT_NE(status->body.find("\"readOnlyRunDir\":\"" + *run_dir_ + "\""), std::string::npos)
      << status->body.substr(0, 300);

  const std::optional<std::string> chromium = FindProgram({"chromium", "chromium-browser"});
  if (!chromium.has_value()) {
    (*show)->Stop(absl::Seconds(10));
    GTEST_SKIP() << "headless Chromium is not installed (Debian package 'chromium'; "
                    "scripts/setup installs it): the finished run's page is not rendered";
  }
  const std::string profile = TempPath("chromium-profile");
  const std::string url = absl::StrCat("http://127.0.0.1:", port, "/");
  absl::StatusOr<CommandResult> rendered =
      RunCommand({*chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
                  "--virtual-time-budget=5000", "--dump-dom", url},
                 {{"HOME", profile}}, absl::Seconds(120));
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  ASSERT_EQ(rendered->exit_code, 0) << rendered->errors;
  const std::string& dom = rendered->output;
  ASSERT_NE(dom.find("Tributary coordinator"), std::string::npos) << rendered->errors;
  EXPECT_NE(dom.find("finished run " + *run_dir_ + " (read-only)"), std::string::npos);

  // Each curve has a point for every point of the history.
  auto points_of = [&](const std::string& label) {
    std::smatch match;
    const std::regex curve("class=\"curve\" data-label=\"" + label + "\" data-points=\"(\\d+)\"");
    return std::regex_search(dom, match, curve) ? std::stoi(match[1]) : -1;
  };
  EXPECT_EQ(points_of("loss"), history.steps_size());
  EXPECT_EQ(points_of("samples/s"), history.steps_size());
  EXPECT_EQ(points_of("step time"), history.steps_size());
  EXPECT_EQ(points_of("accuracy"), history.evaluations_size()) << "a point per evaluation";
  for (const v1::WorkerTimeline& worker : history.workers()) {
    EXPECT_EQ(points_of(worker.worker_id()), worker.points_size()) << worker.worker_id();
  }
  // Accuracy on a 0-1 axis, whatever the values; readable y labels.
  EXPECT_NE(dom.find("<svg id=\"accuracy-chart\" width=\"380\" height=\"180\" data-y-min=\"0\" "
                     "data-y-max=\"1\">"),
            std::string::npos);
  const std::regex label("<text class=\"y-label\"[^>]*>([^<]*)</text>");
  const std::string drawn = dom.substr(0, dom.find("<script>"));  // Not the page's code.
  int labels = 0;
  for (std::sregex_iterator it(drawn.begin(), drawn.end(), label), end; it != end; ++it) {
    const std::string text = (*it)[1];
    ++labels;
    EXPECT_LE(text.size(), 7u) << "y label '" << text << "' is too long for the axis";
    EXPECT_NE(text[0], '.') << "y label '" << text << "' lost its leading digit";
  }
  EXPECT_GT(labels, 12);
  // The job list, and the worker timeline naming both workers.
  EXPECT_NE(dom.find("<a href=\"#job=" + job.job_id() + "\">" + job.job_id() + "</a>"),
            std::string::npos);
  for (const v1::WorkerTimeline& worker : history.workers()) {
    EXPECT_NE(dom.find("<span class=\"worker-id\">" + worker.worker_id() + "</span>"),
              std::string::npos);
  }
  EXPECT_NE(dom.find("<span class=\"state COMPLETED\">COMPLETED</span>"), std::string::npos);

  (*show)->Signal(SIGINT);
  ASSERT_TRUE((*show)->Wait(absl::Seconds(10))) << "tributary show did not stop on Ctrl-C";
  EXPECT_EQ((*show)->exit_code(), 0) << ReadAll(log);
}

// --keep_dashboard: the page the user has open keeps working after the job, on the
// same URL, read-only from the run directory, until Ctrl-C; the exit code is the job's.
TEST(KeepDashboardTest, TheLocalDashboardStaysUpAfterTheJobUntilCtrlC) {
  const std::string dir = TestDir("keep");
  const std::string log = dir + "/local.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> local =
      ChildProcess::Start("tributary local",
                          {Runfile("cli/tributary"), "local", "--bin_dir=" + BinDir(),
                           "--run_dir=" + dir + "/run", "--dataset=synthetic", "--layers=784,32,10",
                           "--max_steps=50", "--epochs=0", "--keep_dashboard"},
                          log);
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string kept =
      AwaitInLog(**local, log, std::regex(R"(finished run \(read-only\): (http://\S+/))"));
  ASSERT_FALSE(kept.empty()) << ReadAll(log);
  std::smatch live;
  const std::string text = ReadAll(log);
  ASSERT_TRUE(std::regex_search(text, live, std::regex(R"(dashboard: (http://\S+/))"))) << text;
  EXPECT_EQ(kept, live[1].str()) << "the same URL as while the job ran";
  const std::string port = kept.substr(kept.rfind(':') + 1, kept.size() - kept.rfind(':') - 2);
  httplib::Client http("127.0.0.1", std::stoi(port));
  auto status = http.Get("/api/v1/status");
  ASSERT_TRUE(status);
  EXPECT_NE(status->body.find("\"readOnlyRunDir\":\"" + dir + "/run\""), std::string::npos);
  EXPECT_NE(status->body.find("\"state\":\"COMPLETED\""), std::string::npos);
  EXPECT_TRUE((*local)->Running()) << "it waits for Ctrl-C";
  (*local)->Signal(SIGINT);
  ASSERT_TRUE((*local)->Wait(absl::Seconds(10))) << ReadAll(log);
  EXPECT_EQ((*local)->exit_code(), 0) << "the job completed: " << ReadAll(log);
}

}  // namespace
}  // namespace tributary::testing
