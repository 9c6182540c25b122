#include "services/coordinator/failure_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

v1::HeartbeatRequest Report(v1::WorkerPhase phase, const std::string& error = "") {
  v1::HeartbeatRequest report;
  report.set_phase(phase);
  report.set_error(error);
  return report;
}

TEST(ClassifyReportTest, FailedWinsOverEverything) {
  EXPECT_EQ(ClassifyReport(Report(v1::WORKER_FAILED, "boom"), true, true), ReportKind::kFailed);
  EXPECT_EQ(ClassifyReport(Report(v1::WORKER_FAILED), false, false), ReportKind::kFailed);
}

TEST(ClassifyReportTest, LeavingAStepCountsOnlyInTheCurrentGeneration) {
  const v1::HeartbeatRequest left = Report(v1::WORKER_RENDEZVOUS, "allreduce timed out");
  EXPECT_EQ(ClassifyReport(left, true, false), ReportKind::kLeftStep);
  EXPECT_EQ(ClassifyReport(left, false, false), ReportKind::kNormal);
  // Rendezvous without an error is an ordinary start of a generation.
  EXPECT_EQ(ClassifyReport(Report(v1::WORKER_RENDEZVOUS), true, false), ReportKind::kNormal);
}

TEST(ClassifyReportTest, AnotherPhaseAfterAFailureIsARecovery) {
  EXPECT_EQ(ClassifyReport(Report(v1::WORKER_IDLE), false, true), ReportKind::kRecovered);
  EXPECT_EQ(ClassifyReport(Report(v1::WORKER_TRAINING), true, false), ReportKind::kNormal);
}

TEST(MissedHeartbeatsTest, StrictlyLongerThanTheTimeout) {
  const absl::Time last = absl::FromUnixSeconds(100);
  EXPECT_FALSE(MissedHeartbeats(last, last + absl::Seconds(10), absl::Seconds(10)));
  EXPECT_TRUE(MissedHeartbeats(last, last + absl::Seconds(10.001), absl::Seconds(10)));
}

TEST(SameErrorEverywhereTest, EveryWorkerOfAGenerationOfTwoOrMore) {
  const std::map<std::string, std::string> both = {{"a", "no file"}, {"b", "no file"}};
  EXPECT_THAT(SameErrorEverywhere(4, 2, both, {std::nullopt}, "no file"),
              Optional(HasSubstr("every worker of generation 4 (2) failed with: no file")));
  // One worker, or a different error, or one that has not failed: no verdict.
  EXPECT_EQ(SameErrorEverywhere(4, 1, {{"a", "no file"}}, {std::nullopt}, "no file"), std::nullopt);
  EXPECT_EQ(SameErrorEverywhere(4, 2, {{"a", "no file"}, {"b", "oom"}}, {std::nullopt}, "oom"),
            std::nullopt);
  EXPECT_EQ(SameErrorEverywhere(4, 3, both, {std::nullopt}, "no file"), std::nullopt);
}

TEST(SameErrorEverywhereTest, EveryRegisteredWorker) {
  EXPECT_THAT(SameErrorEverywhere(0, 0, {}, {std::string("bad spec")}, "bad spec"),
              Optional(HasSubstr("every registered worker (1) failed with: bad spec")));
  EXPECT_EQ(SameErrorEverywhere(0, 0, {}, {std::string("bad spec"), std::nullopt}, "bad spec"),
            std::nullopt);
  EXPECT_EQ(SameErrorEverywhere(0, 0, {}, {std::string("x"), std::string("y")}, "y"), std::nullopt);
  EXPECT_EQ(SameErrorEverywhere(0, 0, {}, {}, "y"), std::nullopt);
}

TEST(FailureStreakTest, FailsAtTheLimitOfGenerationsWithoutProgress) {
  FailureStreak streak(3);
  EXPECT_EQ(streak.GenerationEnded(true, false, "a"), std::nullopt);
  EXPECT_EQ(streak.GenerationEnded(true, false, "b"), std::nullopt);
  EXPECT_THAT(streak.GenerationEnded(true, false, "c"),
              Optional(HasSubstr("3 generations in a row ended by worker errors without "
                                 "completing a step; last: c")));
}

TEST(FailureStreakTest, ProgressRestartsTheCount) {
  FailureStreak streak(2);
  EXPECT_EQ(streak.GenerationEnded(true, false, "a"), std::nullopt);
  // A worker error after progress counts as the first of a new streak.
  EXPECT_EQ(streak.GenerationEnded(true, true, "b"), std::nullopt);
  EXPECT_EQ(streak.in_a_row(), 1u);
  // A generation that ends for another cause after progress clears it.
  EXPECT_EQ(streak.GenerationEnded(false, true, "scale up"), std::nullopt);
  EXPECT_EQ(streak.in_a_row(), 0u);
  // ... and one without progress leaves it alone.
  EXPECT_EQ(streak.GenerationEnded(true, false, "c"), std::nullopt);
  EXPECT_EQ(streak.GenerationEnded(false, false, "left"), std::nullopt);
  EXPECT_TRUE(streak.GenerationEnded(true, false, "d").has_value());
  streak.Reset();
  EXPECT_EQ(streak.in_a_row(), 0u);
}

TEST(FailureStreakTest, ZeroMeansNever) {
  FailureStreak streak(0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(streak.GenerationEnded(true, false, "x"), std::nullopt);
}

}  // namespace
}  // namespace tributary::coordinator
