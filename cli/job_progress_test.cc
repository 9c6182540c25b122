// How the command line shows a job: the progress line, the training time and the
// summary JSON, from Job messages alone.
#include "cli/job_progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/proto_time.h"

namespace tributary::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Job RunningJob() {
  v1::Job job;
  job.set_job_id("job-7");
  job.set_state(v1::RUNNING);
  job.set_step(250);
  job.set_total_steps(1000);
  job.set_epoch(0);
  job.mutable_spec()->set_epochs(3);
  v1::ProgressPoint* point = job.add_progress();
  point->set_loss(0.5f);
  point->set_samples_per_second(12345);
  point->set_test_accuracy(0.8125f);
  return job;
}

TEST(JobProgressTest, TheLineSaysStepLossAccuracyThroughputAndTheTimeLeft) {
  const std::string line = ProgressLine(RunningJob(), 100);
  EXPECT_THAT(line, HasSubstr("RUNNING"));
  EXPECT_THAT(line, HasSubstr("epoch 1/3"));
  EXPECT_THAT(line, HasSubstr("step 250/1000"));
  EXPECT_THAT(line, HasSubstr("loss 0.5000"));
  EXPECT_THAT(line, HasSubstr("acc 0.8125"));
  EXPECT_THAT(line, HasSubstr("12345 samples/s"));
  EXPECT_THAT(line, HasSubstr("elapsed 01:40"));
  EXPECT_THAT(line, HasSubstr("ETA 05:00"));  // 750 steps at 2.5 steps/s.
}

TEST(JobProgressTest, AModelWithItsOwnLossShowsItsTestLossAndMetricsAndAPauseNoThroughput) {
  v1::Job job = RunningJob();
  job.set_state(v1::PAUSED);
  v1::ProgressPoint* point = job.mutable_progress(0);
  point->set_test_accuracy(-1);
  point->set_test_loss(2.25f);
  (*point->mutable_metrics())["perplexity"] = 9.5;
  const std::string line = ProgressLine(job, 10);
  EXPECT_THAT(line, HasSubstr("acc -  test_loss 2.2500  perplexity 9.5000"));
  EXPECT_THAT(line, HasSubstr(" 0 samples/s"));
  EXPECT_THAT(line, Not(HasSubstr("12345")));
}

TEST(JobProgressTest, DurationsAndTrainingTime) {
  EXPECT_EQ(FormatDuration(59.6), "01:00");
  EXPECT_EQ(FormatDuration(3725), "1:02:05");
  EXPECT_EQ(FormatDuration(-1), "--:--");
  v1::Job job = RunningJob();
  EXPECT_EQ(TrainingSeconds(job), 0);  // Not started.
  *job.mutable_started() = ToProto(absl::FromUnixSeconds(1000));
  *job.mutable_finished() = ToProto(absl::FromUnixSeconds(1042));
  EXPECT_DOUBLE_EQ(TrainingSeconds(job), 42);
}

TEST(JobProgressTest, TheSummaryJsonCarriesTheResultAndTheSpec) {
  Summary summary;
  summary.job = RunningJob();
  summary.job.set_state(v1::COMPLETED);
  summary.job.mutable_result()->set_test_accuracy(0.875f);
  (*summary.job.mutable_result()->mutable_metrics())["f1"] = 0.5;
  summary.wall_seconds = 12.5;
  summary.bytes_pushed = 1000;
  const std::string json = SummaryJson(summary);
  EXPECT_THAT(json, HasSubstr("\"job_id\":\"job-7\""));
  EXPECT_THAT(json, HasSubstr("\"state\":\"COMPLETED\""));
  EXPECT_THAT(json, HasSubstr("\"test_accuracy\":0.875000"));
  EXPECT_THAT(json, HasSubstr("\"final_loss\":0.500000"));  // The last point's, without a result.
  EXPECT_THAT(json, HasSubstr("\"wall_seconds\":12.500"));
  EXPECT_THAT(json, HasSubstr("\"bytes_pushed\":1000"));
  EXPECT_THAT(json, HasSubstr("\"metrics\":{\"f1\":0.5}"));
  EXPECT_THAT(json, HasSubstr("\"job_spec\":{\"epochs\":3}"));
}

}  // namespace
}  // namespace tributary::cli
