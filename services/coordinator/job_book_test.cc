#include "services/coordinator/job_book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_samples(1000);
  spec.set_global_batch_size(100);
  spec.set_epochs(2);
  return WithDefaults(spec);
}

struct Changes {
  int urgent = 0;
  int progress = 0;
};

JobBook Book(Changes* changes, size_t max_events = 1000, size_t history = 1000) {
  return JobBook(max_events, history, [changes](bool urgent) {
    if (urgent) {
      ++changes->urgent;
    } else {
      ++changes->progress;
    }
  });
}

v1::HeartbeatRequest Report(uint64_t generation, v1::WorkerPhase phase, uint64_t step, float loss) {
  v1::HeartbeatRequest report;
  report.set_generation(generation);
  report.set_phase(phase);
  report.set_step(step);
  report.set_loss(loss);
  report.set_test_accuracy(-1);
  report.set_samples_per_second(100);
  return report;
}

TEST(JobBookTest, SubmitMakesOnePendingActiveJobWithItsSteps) {
  Changes changes;
  JobBook book = Book(&changes);
  absl::StatusOr<v1::Job*> job = book.Submit(Spec(), kT0);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)->state(), v1::PENDING);
  EXPECT_THAT((*job)->job_id(), HasSubstr("job-1-"));
  EXPECT_EQ((*job)->total_steps(), 20u);
  EXPECT_EQ((*job)->steps_per_epoch(), 10u);
  ASSERT_EQ((*job)->events_size(), 1);
  EXPECT_EQ(changes.urgent, 1);
  EXPECT_EQ(book.Active(), *job);
  absl::StatusOr<v1::Job*> second = book.Submit(Spec(), kT0);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("one active job at a time"));
}

TEST(JobBookTest, ControlTargetNamesTheProblem) {
  Changes changes;
  JobBook book = Book(&changes);
  EXPECT_EQ(book.ControlTarget("").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(book.ControlTarget("job-9").status().message(), HasSubstr("unknown job id 'job-9'"));
  v1::Job* job = *book.Submit(Spec(), kT0);
  EXPECT_EQ(*book.ControlTarget(""), job);
  EXPECT_EQ(*book.ControlTarget(job->job_id()), job);
  book.Finish(*job, v1::STOPPED, "stopped: test", kT0 + absl::Seconds(1));
  EXPECT_TRUE(job->has_finished());
  EXPECT_EQ(book.Active(), nullptr);
  EXPECT_EQ(book.Shown(), job);  // The newest, once none is active.
}

TEST(JobBookTest, TheEventLogKeepsTheNewest) {
  Changes changes;
  JobBook book = Book(&changes, /*max_events=*/3);
  v1::Job* job = *book.Submit(Spec(), kT0);
  for (int i = 0; i < 5; ++i) book.Transition(*job, v1::RENDEZVOUS, absl::StrCat("r", i), kT0);
  ASSERT_EQ(job->events_size(), 3);
  EXPECT_EQ(job->events(0).reason(), "r2");
  EXPECT_EQ(job->events(2).reason(), "r4");
  EXPECT_EQ(job->state_reason(), "r4");
}

TEST(JobBookTest, ProgressFollowsTheSlowestWorkerAndWeighsLossByReplicas) {
  Changes changes;
  JobBook book = Book(&changes);
  v1::Job* job = *book.Submit(Spec(), kT0);
  const v1::HeartbeatRequest fast = Report(7, v1::WORKER_TRAINING, 9, 1.0);
  const v1::HeartbeatRequest slow = Report(7, v1::WORKER_TRAINING, 6, 4.0);
  std::vector<ReportView> views = {{&fast, 3, 0}, {&slow, 1, 1}};
  JobBook::Progress progress = book.RecordProgress(*job, 7, 0, views, kT0);
  EXPECT_TRUE(progress.all_training);
  EXPECT_FALSE(progress.all_finished);
  EXPECT_EQ(job->step(), 6u);
  ASSERT_EQ(job->progress_size(), 1);
  EXPECT_FLOAT_EQ(job->progress(0).loss(), (3 * 1.0 + 1 * 4.0) / 4);
  EXPECT_DOUBLE_EQ(job->progress(0).samples_per_second(), 200);
  EXPECT_EQ(changes.progress, 1);
  // No advance: no new point.
  book.RecordProgress(*job, 7, 0, views, kT0);
  EXPECT_EQ(job->progress_size(), 1);
}

// Rank 0's report arrived after it evaluated at step 100 while the other worker's last
// report says step 77: the point at step 77 carries no accuracy (it once carried the
// step-100 one, an accuracy before the job had evaluated at the point's step); the point
// at 100 does.
TEST(JobBookTest, APointCarriesOnlyAnEvaluationOfItsStepOrBefore) {
  Changes changes;
  JobBook book = Book(&changes);
  v1::Job* job = *book.Submit(Spec(), kT0);
  v1::HeartbeatRequest rank0 = Report(7, v1::WORKER_TRAINING, 101, 0.5);
  rank0.set_test_accuracy(0.75);
  rank0.set_test_accuracy_step(100);
  v1::HeartbeatRequest behind = Report(7, v1::WORKER_TRAINING, 77, 0.5);
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}, {&behind, 1, 1}}, kT0);
  ASSERT_EQ(job->progress_size(), 1);
  EXPECT_EQ(job->progress(0).step(), 77u);
  EXPECT_LT(job->progress(0).test_accuracy(), 0.0f);
  behind.set_step(100);
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}, {&behind, 1, 1}}, kT0);
  ASSERT_EQ(job->progress_size(), 2);
  EXPECT_FLOAT_EQ(job->progress(1).test_accuracy(), 0.75f);
  // Later points keep it while no newer evaluation is reached.
  rank0.set_test_accuracy(0.8f);
  rank0.set_test_accuracy_step(200);
  behind.set_step(150);
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}, {&behind, 1, 1}}, kT0);
  ASSERT_EQ(job->progress_size(), 3);
  EXPECT_FLOAT_EQ(job->progress(2).test_accuracy(), 0.75f);
}

// A worker reports its last step before it evaluates there: the point at that step is
// made with the earlier evaluation, and the evaluation that follows completes it (the
// last point then says what the job's result says).
TEST(JobBookTest, AnEvaluationArrivingAfterItsStepsPointCompletesThatPoint) {
  Changes changes;
  JobBook book = Book(&changes);
  v1::Job* job = *book.Submit(Spec(), kT0);
  v1::HeartbeatRequest rank0 = Report(7, v1::WORKER_TRAINING, 10, 0.5);
  rank0.set_test_accuracy(0.5f);
  rank0.set_test_loss(4.0f);
  rank0.set_test_accuracy_step(5);
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}}, kT0);
  ASSERT_EQ(job->progress_size(), 1);
  EXPECT_FLOAT_EQ(job->progress(0).test_loss(), 4.0f);
  const int changed = changes.progress;
  rank0.set_test_accuracy(0.6f);
  rank0.set_test_loss(3.5f);
  rank0.set_test_accuracy_step(10);
  (*rank0.mutable_test_metrics())["token_accuracy"] = 0.25;
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}}, kT0);
  ASSERT_EQ(job->progress_size(), 1);  // No new point: the step did not advance.
  EXPECT_FLOAT_EQ(job->progress(0).test_loss(), 3.5f);
  EXPECT_FLOAT_EQ(job->progress(0).test_accuracy(), 0.6f);
  EXPECT_EQ(job->progress(0).metrics().at("token_accuracy"), 0.25);
  EXPECT_EQ(changes.progress, changed + 1);
  // The same reports again change nothing.
  book.RecordProgress(*job, 7, 0, {{&rank0, 1, 0}}, kT0);
  EXPECT_EQ(changes.progress, changed + 1);
}

TEST(JobBookTest, AWorkerWithoutAReportHoldsTheJobAtTheResumeStep) {
  Changes changes;
  JobBook book = Book(&changes);
  v1::Job* job = *book.Submit(Spec(), kT0);
  const v1::HeartbeatRequest old = Report(6, v1::WORKER_TRAINING, 15, 1.0);
  const v1::HeartbeatRequest now = Report(7, v1::WORKER_FINISHED, 20, 1.0);
  JobBook::Progress progress =
      book.RecordProgress(*job, 7, 12, {{&now, 1, 0}, {&old, 1, 1}, {nullptr, 1, 2}}, kT0);
  EXPECT_FALSE(progress.all_training);
  EXPECT_FALSE(progress.all_finished);
  EXPECT_EQ(job->step(), 12u);
  progress = book.RecordProgress(*job, 7, 12, {{&now, 1, 0}}, kT0);
  EXPECT_TRUE(progress.all_finished);
  EXPECT_EQ(job->step(), 20u);
  EXPECT_EQ(job->epoch(), 2u);
}

TEST(JobBookTest, LongHistoriesAreThinnedKeepingTheLatestPoint) {
  Changes changes;
  JobBook book = Book(&changes, 1000, /*history=*/4);
  v1::Job* job = *book.Submit(Spec(), kT0);
  for (uint64_t step = 1; step <= 9; ++step) {
    const v1::HeartbeatRequest report = Report(1, v1::WORKER_TRAINING, step, 1.0);
    book.RecordProgress(*job, 1, 0, {{&report, 1, 0}}, kT0);
  }
  EXPECT_LE(job->progress_size(), 4);
  EXPECT_EQ(job->progress(job->progress_size() - 1).step(), 9u);
}

TEST(JobResultOfTest, TakesRankZerosEvaluationAndTheJobsOwnBytes) {
  v1::Job job;
  job.set_step(20);
  *job.mutable_started() = google::protobuf::Timestamp();
  job.mutable_started()->set_seconds(absl::ToUnixSeconds(kT0));
  job.add_progress()->set_samples_per_second(100);
  job.add_progress()->set_samples_per_second(300);
  v1::HeartbeatRequest rank0 = Report(1, v1::WORKER_FINISHED, 20, 0.5);
  rank0.set_test_accuracy(0.9);
  rank0.set_test_loss(0.3);
  rank0.set_bytes_pushed(10);
  v1::HeartbeatRequest rank1 = Report(1, v1::WORKER_FINISHED, 20, 1.5);
  rank1.set_test_accuracy(0.5);
  rank1.set_bytes_pushed(10);
  v1::JobResult result =
      JobResultOf(job, {{&rank1, 1, 1}, {&rank0, 1, 0}}, 1000, 2000, kT0 + absl::Seconds(30));
  EXPECT_EQ(result.steps(), 20u);
  EXPECT_FLOAT_EQ(result.test_accuracy(), 0.9f);
  EXPECT_FLOAT_EQ(result.test_loss(), 0.3f);
  EXPECT_FLOAT_EQ(result.final_loss(), 1.0f);
  EXPECT_EQ(result.bytes_pushed(), 1000u) << "the job's own traffic, not the workers' counts";
  EXPECT_EQ(result.bytes_pulled(), 2000u);
  EXPECT_DOUBLE_EQ(result.samples_per_second(), 200);
  EXPECT_DOUBLE_EQ(result.wall_seconds(), 30);
}

}  // namespace
}  // namespace tributary::coordinator
