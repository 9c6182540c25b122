// `tributary show` on the files of a run: the jobs of its state file (newest first, the
// active one shown), each job's history file, a torn state file read from its previous
// version without being moved, and the dashboard's routes served from them.
#include "cli/run_viewer.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/coordinator/history_file.h"
#include "services/coordinator/state_file.h"

namespace tributary::cli {
namespace {

using ::testing::HasSubstr;

std::string NewDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

v1::Job MakeJob(const std::string& id, v1::JobState state, uint64_t step) {
  v1::Job job;
  job.set_job_id(id);
  job.mutable_spec()->set_name("name-" + id);
  job.set_state(state);
  job.set_step(step);
  job.add_progress()->set_step(step);
  v1::JobEvent* event = job.add_events();
  event->set_to_state(state);
  event->set_reason("because " + id);
  return job;
}

// A run directory as `tributary local` leaves it: two finished jobs, one history.
std::string FinishedRun(const std::string& name) {
  const std::string run = NewDir(name);
  const std::string state_dir = NewDir(name + "/coordinator-state");
  coordinator::CoordinatorState state;
  state.set_format_version(1);
  *state.add_jobs() = MakeJob("job-1-aaaa", v1::STOPPED, 5);
  *state.add_jobs() = MakeJob("job-2-bbbb", v1::COMPLETED, 40);
  EXPECT_TRUE(coordinator::StateFile(state_dir).Save(state).ok());
  v1::JobHistory history;
  history.set_job_id("job-2-bbbb");
  for (uint64_t step = 1; step <= 40; ++step) {
    v1::StepPoint* point = history.add_steps();
    point->set_step(step);
    point->set_loss(1.0f / step);
  }
  history.add_evaluations()->set_step(40);
  EXPECT_TRUE(coordinator::SaveHistoryFile(state_dir, history).ok());
  return run;
}

TEST(RunViewerTest, ShowsTheJobsAndHistoriesOfARunsFiles) {
  const std::string run = FinishedRun("run");
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(run);
  ASSERT_TRUE(viewer.ok()) << viewer.status();
  EXPECT_EQ((*viewer)->state_dir(), run + "/coordinator-state");

  const v1::ClusterStatus status = (*viewer)->Status();
  EXPECT_EQ(status.read_only_run_dir(), run);
  EXPECT_EQ(status.job().job_id(), "job-2-bbbb") << "the newest job";
  EXPECT_EQ(status.nodes_size(), 0);
  const v1::ListJobsResponse jobs = (*viewer)->Jobs();
  ASSERT_EQ(jobs.jobs_size(), 2);
  EXPECT_EQ(jobs.jobs(0).job_id(), "job-2-bbbb") << "newest first";
  EXPECT_EQ(jobs.jobs(1).job_id(), "job-1-aaaa");
  EXPECT_EQ(jobs.jobs(0).progress_size(), 0);

  absl::StatusOr<v1::JobHistory> history = (*viewer)->History("job-2-bbbb");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_EQ(history->steps_size(), 40);
  absl::StatusOr<v1::JobHistory> none = (*viewer)->History("job-1-aaaa");
  ASSERT_TRUE(none.ok()) << "a job without a history file has an empty one";
  EXPECT_EQ(none->steps_size(), 0);
  EXPECT_TRUE(absl::IsNotFound((*viewer)->History("job-9-zzzz").status()));
  EXPECT_TRUE(absl::IsNotFound((*viewer)->Job("job-9-zzzz").status()));
  EXPECT_EQ((*viewer)->Job("job-1-aaaa")->events(0).reason(), "because job-1-aaaa");

  // A coordinator's --state_dir works as well as a run directory.
  EXPECT_TRUE(RunViewer::Open(run + "/coordinator-state").ok());
  const absl::Status empty = RunViewer::Open(NewDir("empty")).status();
  EXPECT_TRUE(absl::IsNotFound(empty)) << empty;
  EXPECT_THAT(std::string(empty.message()), HasSubstr("holds no coordinator state"));
}

TEST(RunViewerTest, AJobStillActiveIsTheOneShownAndChangesAreReadAgain) {
  const std::string run = FinishedRun("active");
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(run);
  ASSERT_TRUE(viewer.ok()) << viewer.status();
  EXPECT_EQ((*viewer)->Jobs().jobs_size(), 2);
  coordinator::CoordinatorState state;
  state.set_format_version(1);
  *state.add_jobs() = MakeJob("job-1-aaaa", v1::RUNNING, 7);  // Cut short: still active.
  *state.add_jobs() = MakeJob("job-2-bbbb", v1::COMPLETED, 40);
  *state.add_jobs() = MakeJob("job-3-cccc", v1::FAILED, 0);
  ASSERT_TRUE(coordinator::StateFile(run + "/coordinator-state").Save(state).ok());
  EXPECT_EQ((*viewer)->Jobs().jobs_size(), 3) << "the state file changed: read again";
  EXPECT_EQ((*viewer)->Status().job().job_id(), "job-1-aaaa");
}

TEST(RunViewerTest, ATornStateFileIsReadFromItsPreviousVersionAndLeftInPlace) {
  const std::string run = FinishedRun("torn");
  coordinator::StateFile file(run + "/coordinator-state");
  coordinator::CoordinatorState state;
  state.set_format_version(1);
  *state.add_jobs() = MakeJob("job-1-aaaa", v1::COMPLETED, 5);
  ASSERT_TRUE(file.Save(state).ok());  // The earlier state becomes the previous version.
  std::ofstream(file.path(), std::ios::trunc) << "tributary-coordinator-state v1 bytes=99";
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(run);
  ASSERT_TRUE(viewer.ok()) << viewer.status();
  EXPECT_EQ((*viewer)->Jobs().jobs_size(), 2) << "the previous version";
  struct stat info;
  EXPECT_EQ(stat(file.path().c_str(), &info), 0) << "read only: nothing moved aside";
}

TEST(RunViewerTest, ServesTheDashboardRoutesFromTheFiles) {
  ShutdownSignal shutdown;
  const std::string run = FinishedRun("served");
  absl::StatusOr<std::unique_ptr<RunViewer>> viewer = RunViewer::Open(run);
  ASSERT_TRUE(viewer.ok()) << viewer.status();
  absl::Mutex mu;
  std::string url;
  absl::Status served;
  std::thread server([&] {
    served = ServeRun(**viewer, "127.0.0.1", 0, shutdown, [&](const std::string& ready) {
      absl::MutexLock lock(&mu);
      url = ready;
    });
  });
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](std::string* u) { return !u->empty(); }, &url),
                                    absl::Seconds(30)));
  }
  ASSERT_THAT(url, HasSubstr("http://127.0.0.1:"));
  const int port = std::stoi(url.substr(std::string("http://127.0.0.1:").size()));
  httplib::Client client("127.0.0.1", port);
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, HasSubstr("Tributary coordinator"));
  auto status_json = client.Get("/api/v1/status");
  ASSERT_TRUE(status_json);
  v1::ClusterStatus status;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(status_json->body, &status).ok());
  EXPECT_EQ(status.read_only_run_dir(), run);
  auto history_json = client.Get("/api/v1/jobs/job-2-bbbb/history");
  ASSERT_TRUE(history_json);
  v1::JobHistory history;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(history_json->body, &history).ok());
  EXPECT_EQ(history.steps_size(), 40);
  auto unknown = client.Get("/api/v1/jobs/job-9-zzzz");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  shutdown.Request("test over");
  server.join();
  EXPECT_TRUE(served.ok()) << served;
}

}  // namespace
}  // namespace tributary::cli
