// The per-step history on its own: one point per step from every worker's report,
// the downsampling bound (every step up to the bound, then an even stride, always the
// last), evaluations kept, per-worker timelines and slow steps, a resume below what
// was recorded, the job's own traffic, the bounds on what a heartbeat may carry, and
// the history file.
#include "services/coordinator/job_history.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/model_metrics.h"
#include "services/coordinator/history_file.h"

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::StepReport Step(uint64_t step, float loss, uint32_t samples, double seconds,
                    double push_wait = 0.001) {
  v1::StepReport report;
  report.set_step(step);
  report.set_epoch(static_cast<uint32_t>((step - 1) / 100));
  report.set_loss(loss);
  report.set_samples(samples);
  report.set_step_seconds(seconds);
  report.set_compute_seconds(seconds / 2);
  report.set_reduce_seconds(0.0001);
  report.set_push_wait_seconds(push_wait);
  report.set_parameters_wait_seconds(0.0002);
  return report;
}

v1::HeartbeatRequest Reports(std::vector<v1::StepReport> steps,
                             std::vector<std::pair<uint64_t, float>> evaluations = {}) {
  v1::HeartbeatRequest request;
  for (v1::StepReport& step : steps) *request.add_steps() = std::move(step);
  for (const auto& [step, accuracy] : evaluations) {
    v1::EvaluationReport* evaluation = request.add_evaluations();
    evaluation->set_step(step);
    evaluation->set_test_accuracy(accuracy);
    evaluation->set_test_loss(1 - accuracy);
  }
  return request;
}

ReportingWorker Worker(const std::string& id, uint32_t rank) {
  return ReportingWorker{id, "node-" + id, rank};
}

HistoryLimits Limits(size_t max_points, size_t max_worker_points = 500) {
  HistoryLimits limits;
  limits.max_points = max_points;
  limits.max_worker_points = max_worker_points;
  return limits;
}

// One worker, `steps` steps, one report each, completed as they come.
v1::JobHistory RunSteps(uint64_t steps, const HistoryLimits& limits, uint64_t eval_every = 0) {
  JobHistory history("job-1", limits);
  for (uint64_t step = 1; step <= steps; ++step) {
    std::vector<std::pair<uint64_t, float>> evaluations;
    if (eval_every > 0 && (step % eval_every == 0 || step == steps)) {
      evaluations.push_back({step, 0.5f + 0.4f * step / steps});
    }
    history.AddReports(Worker("w1", 0), Reports({Step(step, 2.0f / step, 64, 0.01)}, evaluations),
                       kT0);
    history.CompleteThrough(step, kT0);
  }
  return history.proto();
}

TEST(JobHistoryTest, EveryWorkersReportOfAStepMakesOnePoint) {
  JobHistory history("job-1", Limits(100));
  // Worker a ran 3 samples of each step at loss 1, b 1 sample at loss 3; b is slower.
  history.AddReports(Worker("a", 0), Reports({Step(1, 1.0f, 3, 0.1), Step(2, 1.0f, 3, 0.1)}), kT0);
  history.CompleteThrough(0, kT0);
  EXPECT_EQ(history.proto().steps_size(), 0) << "no point before every worker completed it";
  history.AddReports(Worker("b", 1), Reports({Step(1, 3.0f, 1, 0.4, 0.3)}), kT0);
  history.CompleteThrough(1, kT0 + absl::Seconds(1));
  ASSERT_EQ(history.proto().steps_size(), 1);
  const v1::StepPoint& point = history.proto().steps(0);
  EXPECT_EQ(point.step(), 1u);
  EXPECT_FLOAT_EQ(point.loss(), 1.5f) << "weighted by samples: (3 x 1 + 1 x 3) / 4";
  EXPECT_DOUBLE_EQ(point.samples_per_second(), 3 / 0.1 + 1 / 0.4);
  EXPECT_DOUBLE_EQ(point.step_seconds(), 0.4);
  EXPECT_EQ(point.slowest_worker(), "b");
  EXPECT_DOUBLE_EQ(point.median_step_seconds(), 0.1);
  EXPECT_DOUBLE_EQ(point.push_wait_seconds(), 0.3);
  EXPECT_EQ(point.workers(), 2u);
  EXPECT_EQ(point.time().seconds(), absl::ToUnixSeconds(kT0) + 1);

  history.AddReports(Worker("b", 1), Reports({Step(2, 3.0f, 1, 0.1)}), kT0);
  history.CompleteThrough(2, kT0);
  EXPECT_EQ(history.proto().steps_size(), 2);
  // A report of a step already recorded is late: dropped, no second point.
  history.AddReports(Worker("a", 0), Reports({Step(2, 9.0f, 3, 0.1)}), kT0);
  history.CompleteThrough(2, kT0);
  EXPECT_EQ(history.proto().steps_size(), 2);
  EXPECT_FLOAT_EQ(history.proto().steps(1).loss(), 1.5f);
  EXPECT_EQ(history.proto().steps_recorded(), 2u);
}

TEST(JobHistoryTest, A400StepJobKeepsAPointPerStepAndEveryEvaluation) {
  const v1::JobHistory history = RunSteps(400, Limits(2000), 50);
  ASSERT_EQ(history.steps_size(), 400);
  for (int i = 0; i < 400; ++i) EXPECT_EQ(history.steps(i).step(), static_cast<uint64_t>(i + 1));
  ASSERT_EQ(history.evaluations_size(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(history.evaluations(i).step(), 50u * (i + 1));
  EXPECT_EQ(history.stride(), 1u);
}

TEST(JobHistoryTest, LongJobsAreThinnedToAnEvenStrideWithinTheBoundKeepingTheLastStep) {
  for (const uint64_t steps : {100u, 101u, 999u, 1000u, 4097u}) {
    SCOPED_TRACE(absl::StrCat(steps, " steps"));
    const v1::JobHistory history = RunSteps(steps, Limits(100), 7);
    EXPECT_LE(history.steps_size(), 101) << "the bound: max_points + the latest";
    EXPECT_EQ(history.steps_recorded(), steps);
    const uint64_t stride = history.stride();
    EXPECT_EQ(stride & (stride - 1), 0u) << "a power of two";
    EXPECT_EQ(history.steps(history.steps_size() - 1).step(), steps) << "the last step is kept";
    for (int i = 0; i + 1 < history.steps_size(); ++i) {
      EXPECT_EQ(history.steps(i).step(), stride * (i + 1)) << "evenly spaced from the start";
    }
    // Not thinner than needed: with twice the stride it would not fill half the bound.
    EXPECT_GT(history.steps_size(), 50);
    // Evaluations are a series of their own: every one kept while they fit.
    const uint64_t evaluations = steps / 7 + (steps % 7 != 0 ? 1 : 0);
    if (evaluations <= 100) {
      EXPECT_EQ(history.evaluations_size(), static_cast<int>(evaluations));
    } else {
      EXPECT_LE(history.evaluations_size(), 100);
    }
    EXPECT_EQ(history.evaluations(history.evaluations_size() - 1).step(), steps);
  }
  EXPECT_EQ(RunSteps(100, Limits(100)).stride(), 1u) << "the bound itself is not thinned";
  EXPECT_EQ(RunSteps(101, Limits(100)).stride(), 2u);
}

TEST(JobHistoryTest, EvaluationsBeyondTheBoundAreHalvedKeepingTheLatest) {
  const v1::JobHistory history = RunSteps(300, Limits(10), 1);
  EXPECT_LE(history.evaluations_size(), 10);
  EXPECT_GE(history.evaluations_size(), 5);
  EXPECT_EQ(history.evaluations(history.evaluations_size() - 1).step(), 300u);
  for (int i = 1; i < history.evaluations_size(); ++i) {
    EXPECT_LT(history.evaluations(i - 1).step(), history.evaluations(i).step());
  }
  // The same step evaluated again (rank 0 evaluates once more after a late restart)
  // replaces the value rather than adding a point.
  JobHistory again("job-1", Limits(10));
  again.AddReports(Worker("w", 0), Reports({}, {{5, 0.5f}}), kT0);
  again.AddReports(Worker("w", 0), Reports({}, {{5, 0.75f}}), kT0);
  ASSERT_EQ(again.proto().evaluations_size(), 1);
  EXPECT_FLOAT_EQ(again.proto().evaluations(0).test_accuracy(), 0.75f);
}

TEST(JobHistoryTest, WorkerTimelinesHoldEachWorkersTimingsAndNameTheSlowOne) {
  JobHistory history("job-1", Limits(100, 10));
  for (uint64_t step = 1; step <= 40; ++step) {
    history.AddReports(Worker("fast-1", 0), Reports({Step(step, 1, 32, 0.05, 0.01)}), kT0);
    history.AddReports(Worker("fast-2", 1), Reports({Step(step, 1, 32, 0.06, 0.02)}), kT0);
    history.AddReports(Worker("slow", 2), Reports({Step(step, 1, 32, 0.30, 0.00)}), kT0);
    history.CompleteThrough(step, kT0);
  }
  const v1::JobHistory& proto = history.proto();
  ASSERT_EQ(proto.workers_size(), 3);
  const v1::WorkerTimeline& slow = proto.workers(2);
  EXPECT_EQ(slow.worker_id(), "slow");
  EXPECT_EQ(slow.node_name(), "node-slow");
  EXPECT_EQ(slow.global_rank(), 2u);
  EXPECT_EQ(slow.steps(), 40u);
  EXPECT_EQ(slow.slow_steps(), 40u) << "above 1.5 x the median in every step";
  EXPECT_NEAR(slow.total_step_seconds(), 40 * 0.30, 1e-9);
  EXPECT_EQ(proto.workers(0).slow_steps(), 0u);
  EXPECT_EQ(proto.workers(1).slow_steps(), 0u);
  EXPECT_NEAR(proto.workers(1).total_push_wait_seconds(), 40 * 0.02, 1e-9);
  EXPECT_EQ(proto.steps(proto.steps_size() - 1).slowest_worker(), "slow");
  // Each timeline is bounded like the steps: 10 points + the latest.
  for (const v1::WorkerTimeline& timeline : proto.workers()) {
    EXPECT_LE(timeline.points_size(), 11);
    EXPECT_EQ(timeline.points(timeline.points_size() - 1).step(), 40u);
    for (int i = 0; i + 1 < timeline.points_size(); ++i) {
      EXPECT_EQ(timeline.points(i).step() % timeline.stride(), 0u);
    }
  }
  const v1::WorkerStepTiming& last = proto.workers(1).points(proto.workers(1).points_size() - 1);
  EXPECT_DOUBLE_EQ(last.step_seconds(), 0.06);
  EXPECT_DOUBLE_EQ(last.push_wait_seconds(), 0.02);
  EXPECT_DOUBLE_EQ(last.compute_seconds(), 0.03);
  EXPECT_DOUBLE_EQ(last.parameters_wait_seconds(), 0.0002);
  EXPECT_EQ(last.samples(), 32u);
}

TEST(JobHistoryTest, AtMost64WorkersHaveATimelineTheRestAreCounted) {
  JobHistory history("job-1", Limits(100));
  for (int w = 0; w < 70; ++w) {
    history.AddReports(Worker(absl::StrCat("w", w), w), Reports({Step(1, 1, 1, 0.1)}), kT0);
    history.AddReports(Worker(absl::StrCat("w", w), w), Reports({Step(2, 1, 1, 0.1)}), kT0);
  }
  history.CompleteThrough(2, kT0);
  EXPECT_EQ(history.proto().workers_size(), 64);
  EXPECT_EQ(history.proto().workers_without_timeline(), 6u);
  EXPECT_EQ(history.proto().steps(0).workers(), 70u) << "every report still counts in the point";
}

TEST(JobHistoryTest, StepsThatNeverCompleteEverywhereAreBounded) {
  HistoryLimits limits = Limits(100);
  limits.max_pending_steps = 8;
  JobHistory history("job-1", limits);
  // An ASYNC worker far ahead of one that reports nothing.
  for (uint64_t step = 1; step <= 20; ++step) {
    history.AddReports(Worker("ahead", 0), Reports({Step(step, 1, 1, 0.1)}), kT0);
  }
  EXPECT_EQ(history.proto().steps_size(), 12) << "the oldest beyond 8 gathered became points";
  EXPECT_EQ(history.proto().steps(0).workers(), 1u);
  history.Finish(kT0);
  EXPECT_EQ(history.proto().steps_size(), 20) << "the job ended: the rest too";
}

TEST(JobHistoryTest, AResumeBelowWhatWasRecordedDropsWhatRunsAgain) {
  JobHistory history("job-1", Limits(100));
  for (uint64_t step = 1; step <= 10; ++step) {
    history.AddReports(Worker("a", 0), Reports({Step(step, 1, 1, 0.1)}, {{step, 0.5f}}), kT0);
    history.CompleteThrough(step, kT0);
  }
  history.AddReports(Worker("a", 0), Reports({Step(11, 1, 1, 0.1), Step(12, 1, 1, 0.1)}), kT0);
  // The shards went back to step 8: steps 9.. run again.
  history.ResumeAt(8, kT0);
  EXPECT_EQ(history.proto().steps_size(), 8);
  EXPECT_EQ(history.proto().steps(7).step(), 8u);
  EXPECT_EQ(history.proto().evaluations_size(), 8);
  EXPECT_EQ(history.proto().workers(0).points(history.proto().workers(0).points_size() - 1).step(),
            8u);
  for (uint64_t step = 9; step <= 12; ++step) {
    history.AddReports(Worker("a2", 0), Reports({Step(step, 0.5f, 1, 0.1)}), kT0);
    history.CompleteThrough(step, kT0);
  }
  ASSERT_EQ(history.proto().steps_size(), 12);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(history.proto().steps(i).step(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_FLOAT_EQ(history.proto().steps(11).loss(), 0.5f) << "the run that counts";
}

TEST(JobHistoryTest, TrafficIsWhatEachGenerationAdded) {
  JobHistory history("job-1", Limits(100));
  // Counts are per generation: they grow within one and start again at the next.
  history.CountTraffic("a", 1, 100, 1000);
  history.CountTraffic("a", 1, 250, 2500);
  history.CountTraffic("a", 1, 250, 2500);  // Nothing new.
  history.CountTraffic("b", 1, 40, 400);
  history.CountTraffic("a", 2, 50, 500);
  history.CountTraffic("a", 2, 30, 300);  // Never backwards.
  EXPECT_EQ(history.proto().bytes_pushed(), 250u + 40u + 50u);
  EXPECT_EQ(history.proto().bytes_pulled(), 2500u + 400u + 500u);
  // Saturates rather than wraps.
  for (uint64_t generation = 3; generation < 3000; ++generation) {
    history.CountTraffic("a", generation, kMaxReportedBytes, 0);
  }
  EXPECT_EQ(history.proto().bytes_pushed(), std::numeric_limits<uint64_t>::max());
}

TEST(JobHistoryTest, AHistoryReadBackGoesOnWhereItStood) {
  JobHistory first("job-1", Limits(100));
  for (uint64_t step = 1; step <= 150; ++step) {
    first.AddReports(Worker("a", 0), Reports({Step(step, 1, 1, 0.1)}), kT0);
    first.CompleteThrough(step, kT0);
  }
  JobHistory restored(first.proto(), Limits(100));
  restored.AddReports(Worker("a", 0), Reports({Step(150, 1, 1, 0.1), Step(151, 1, 1, 0.1)}), kT0);
  restored.CompleteThrough(151, kT0);
  const v1::JobHistory& proto = restored.proto();
  EXPECT_EQ(proto.steps_recorded(), 151u) << "step 150 was recorded before the restart";
  EXPECT_EQ(proto.steps(proto.steps_size() - 1).step(), 151u);
  EXPECT_EQ(proto.workers_size(), 1) << "the same worker's timeline goes on";
}

// The bounds a heartbeat's history fields are held to: each at its limit, and one past.
TEST(ValidateHistoryReportsTest, EveryBoundHoldsAtItsLimitAndRefusesOnePast) {
  auto check = [](const v1::HeartbeatRequest& request) { return ValidateHistoryReports(request); };
  v1::HeartbeatRequest request;
  for (int i = 0; i < kMaxStepReports; ++i) *request.add_steps() = Step(i + 1, 1, 1, 0.1);
  for (int i = 0; i < kMaxEvaluationReports; ++i) {
    v1::EvaluationReport* evaluation = request.add_evaluations();
    evaluation->set_step(i + 1);
    evaluation->set_test_accuracy(1);
    evaluation->set_test_loss(std::nanf(""));  // A diverged model's loss is kept.
  }
  // A model with its own loss: no accuracy (-1), and the most named metrics, the
  // longest name among them.
  request.mutable_evaluations(3)->set_test_accuracy(-1);
  for (int i = 0; i + 1 < static_cast<int>(kMaxModelMetrics); ++i) {
    (*request.mutable_evaluations(1)->mutable_metrics())[absl::StrCat("metric_", i)] = -2.5;
  }
  (*request.mutable_evaluations(1)->mutable_metrics())[std::string(kMaxMetricNameBytes, 'x')] = 1;
  *request.mutable_test_metrics() = request.evaluations(1).metrics();
  request.set_bytes_pushed(kMaxReportedBytes);
  request.set_bytes_pulled(kMaxReportedBytes);
  request.mutable_steps(0)->set_step(kMaxReportedStep);
  request.mutable_steps(0)->set_samples(kMaxReportedSamples);
  request.mutable_steps(0)->set_step_seconds(kMaxReportedSeconds);
  request.mutable_steps(0)->set_loss(std::numeric_limits<float>::infinity());
  ASSERT_TRUE(check(request).ok()) << check(request);

  struct Case {
    std::string name;
    std::function<void(v1::HeartbeatRequest&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"steps", [](auto& r) { *r.add_steps() = Step(1, 1, 1, 0.1); },
       "steps: at most 1024 step reports per heartbeat, got 1025"},
      {"evaluations", [](auto& r) { r.add_evaluations()->set_step(1); },
       "evaluations: at most 64 evaluations per heartbeat, got 65"},
      {"bytes_pushed", [](auto& r) { r.set_bytes_pushed(kMaxReportedBytes + 1); },
       "bytes_pushed: must be at most 2^53"},
      {"bytes_pulled", [](auto& r) { r.set_bytes_pulled(~uint64_t{0}); },
       "bytes_pulled: must be at most 2^53, got 18446744073709551615"},
      {"step 0", [](auto& r) { r.mutable_steps(3)->set_step(0); }, "steps[3].step: must be in"},
      {"step", [](auto& r) { r.mutable_steps(3)->set_step(kMaxReportedStep + 1); },
       "steps[3].step: must be in [1, 2^40]"},
      {"samples", [](auto& r) { r.mutable_steps(5)->set_samples(kMaxReportedSamples + 1); },
       "steps[5].samples: must be at most 65536, got 65537"},
      {"seconds", [](auto& r) { r.mutable_steps(7)->set_step_seconds(kMaxReportedSeconds + 1); },
       "steps[7].step_seconds: must be a finite number in [0, 86400], got 86401"},
      {"negative", [](auto& r) { r.mutable_steps(7)->set_push_wait_seconds(-1); },
       "steps[7].push_wait_seconds"},
      {"nan", [](auto& r) { r.mutable_steps(7)->set_compute_seconds(std::nan("")); },
       "steps[7].compute_seconds"},
      {"inf",
       [](auto& r) {
         r.mutable_steps(7)->set_parameters_wait_seconds(std::numeric_limits<double>::infinity());
       },
       "steps[7].parameters_wait_seconds"},
      {"reduce", [](auto& r) { r.mutable_steps(7)->set_reduce_seconds(-0.5); },
       "steps[7].reduce_seconds"},
      {"accuracy", [](auto& r) { r.mutable_evaluations(2)->set_test_accuracy(1.01f); },
       "evaluations[2].test_accuracy: must be in [0, 1]"},
      {"accuracy nan", [](auto& r) { r.mutable_evaluations(2)->set_test_accuracy(std::nanf("")); },
       "evaluations[2].test_accuracy"},
      {"evaluation step", [](auto& r) { r.mutable_evaluations(4)->set_step(0); },
       "evaluations[4].step"},
      {"accuracy -0.5", [](auto& r) { r.mutable_evaluations(2)->set_test_accuracy(-0.5f); },
       "evaluations[2].test_accuracy: must be in [0, 1] (or -1: none)"},
      {"metrics", [](auto& r) { (*r.mutable_evaluations(1)->mutable_metrics())["one_more"] = 1; },
       "evaluations[1].metrics: at most 16 metrics, got 17"},
      {"metric name",
       [](auto& r) {
         r.mutable_test_metrics()->clear();
         (*r.mutable_test_metrics())["a b"] = 1;
       },
       "test_metrics: names of 1-64 letters, digits or '_', got 'a b'"},
      {"long metric name",
       [](auto& r) {
         (*r.mutable_evaluations(0)->mutable_metrics())[std::string(kMaxMetricNameBytes + 1, 'x')] = 1;
       },
       "evaluations[0].metrics: names of 1-64"},
      {"metric nan", [](auto& r) { (*r.mutable_evaluations(0)->mutable_metrics())["mae"] = std::nan(""); },
       "evaluations[0].metrics[mae]: must be a finite number"},
  };
  for (const Case& bad : cases) {
    v1::HeartbeatRequest spoiled = request;
    bad.spoil(spoiled);
    const absl::Status status = check(spoiled);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << bad.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.message)) << bad.name;
  }
}

TEST(HistoryBookTest, ChangedHistoriesAreTakenWhenDueAndDroppedWithTheirJobs) {
  HistoryBook book(Limits(100));
  book.For("job-1").AddReports(Worker("a", 0), Reports({Step(1, 1, 1, 0.1)}), kT0);
  book.MarkChanged("job-1", false);
  book.MarkChanged("job-unknown", true);  // No history: nothing to write.
  EXPECT_TRUE(book.Due(kT0, absl::Seconds(5))) << "never written yet";
  EXPECT_EQ(book.TakeChanged(kT0).size(), 1u);
  EXPECT_FALSE(book.Due(kT0 + absl::Seconds(1), absl::Seconds(5)));
  book.MarkChanged("job-1", false);
  EXPECT_FALSE(book.Due(kT0 + absl::Seconds(1), absl::Seconds(5)));
  EXPECT_TRUE(book.Due(kT0 + absl::Seconds(5), absl::Seconds(5)));
  book.MarkChanged("job-1", true);
  EXPECT_TRUE(book.Due(kT0 + absl::Seconds(1), absl::Seconds(5))) << "urgent: at once";
  book.For("job-2");
  std::deque<v1::Job> kept(1);
  kept[0].set_job_id("job-2");
  EXPECT_THAT(book.Retain(kept), ::testing::ElementsAre("job-1"));
  EXPECT_EQ(book.Find("job-1"), nullptr);
  EXPECT_TRUE(book.TakeChanged(kT0).empty());
}

TEST(HistoryFileTest, AHistoryGoesToItsFileAndComesBack) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/state");
  const v1::JobHistory written = RunSteps(30, Limits(100), 10);
  ASSERT_TRUE(SaveHistoryFile(dir, written).ok());
  absl::StatusOr<v1::JobHistory> read = LoadHistoryFile(dir, "job-1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->SerializeAsString(), written.SerializeAsString());
  EXPECT_TRUE(absl::IsNotFound(LoadHistoryFile(dir, "job-2").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LoadHistoryFile(dir, "../coordinator_state").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HistoryPath(dir, ".hidden").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HistoryPath(dir, "").status()));
  { std::ofstream(dir + "/history/job-3.json") << "{\"jobId\": \"job-1\"}"; }
  const absl::Status other = LoadHistoryFile(dir, "job-3").status();
  EXPECT_TRUE(absl::IsDataLoss(other)) << other;
  { std::ofstream(dir + "/history/job-4.json") << "not json"; }
  EXPECT_TRUE(absl::IsDataLoss(LoadHistoryFile(dir, "job-4").status()));
  ASSERT_TRUE(RemoveHistoryFile(dir, "job-1").ok());
  EXPECT_TRUE(absl::IsNotFound(LoadHistoryFile(dir, "job-1").status()));
  EXPECT_TRUE(RemoveHistoryFile(dir, "job-1").ok()) << "gone already: fine";
}

}  // namespace
}  // namespace tributary::coordinator
