#include "worker/heartbeat_reports.h"

#include <gtest/gtest.h>

namespace tributary::worker {
namespace {

StepStats Stats(double seconds) {
  StepStats stats;
  stats.step_seconds = seconds;
  stats.loss.samples = 16;
  return stats;
}

TEST(HeartbeatReportsTest, MovesEveryReportIntoTheHeartbeatOnce) {
  HeartbeatReports reports;
  reports.AddStep(0, 0, Stats(0.5));
  reports.AddStep(1, 0, Stats(0.25));
  reports.AddEvaluation(2, 0.75f, 0.5f, {{"perplexity", 3.5}});
  v1::HeartbeatRequest request;
  reports.MoveInto(request);
  ASSERT_EQ(request.steps_size(), 2);
  EXPECT_EQ(request.steps(0).step(), 1u);  // Steps completed, 1-based.
  EXPECT_EQ(request.steps(1).step_seconds(), 0.25);
  EXPECT_EQ(request.steps(1).samples(), 16u);
  ASSERT_EQ(request.evaluations_size(), 1);
  EXPECT_EQ(request.evaluations(0).metrics().at("perplexity"), 3.5);
  EXPECT_EQ(reports.steps(), 0u);
  EXPECT_EQ(reports.evaluations(), 0u);
}

TEST(HeartbeatReportsTest, AnUndeliveredHeartbeatsReportsGoBackInFrontOfNewerOnes) {
  HeartbeatReports reports;
  reports.AddStep(0, 0, Stats(1));
  v1::HeartbeatRequest lost;
  reports.MoveInto(lost);
  reports.AddStep(1, 0, Stats(1));
  reports.PutBack(lost);
  v1::HeartbeatRequest next;
  reports.MoveInto(next);
  ASSERT_EQ(next.steps_size(), 2);
  EXPECT_EQ(next.steps(0).step(), 1u);
  EXPECT_EQ(next.steps(1).step(), 2u);
}

TEST(HeartbeatReportsTest, ALongSilenceKeepsItsShapeWithinTheBound) {
  HeartbeatReports reports;
  for (uint64_t step = 0; step < 5000; ++step) reports.AddStep(step, 0, Stats(1));
  EXPECT_LE(reports.steps(), HeartbeatReports::kMaxSteps);
  EXPECT_GT(reports.steps(), HeartbeatReports::kMaxSteps / 2);
  v1::HeartbeatRequest request;
  reports.MoveInto(request);
  EXPECT_EQ(request.steps(0).step(), 1u) << "the first step stays";
  EXPECT_EQ(request.steps(request.steps_size() - 1).step(), 5000u) << "the newest stays";
  for (int i = 1; i < request.steps_size(); ++i) {
    EXPECT_LT(request.steps(i - 1).step(), request.steps(i).step());
  }
  for (uint64_t i = 0; i < 200; ++i) reports.AddEvaluation(i, 0.5f, 1.0f, {});
  EXPECT_LE(reports.evaluations(), HeartbeatReports::kMaxEvaluations);
}

}  // namespace
}  // namespace tributary::worker
