#include "worker/worker_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Text(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(WorkerMetricsTest, JobSeriesCarryTheJobIdAndGoWithTheJob) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.StartJob("job-1-aa");
  metrics.training_loss().Set(0.25);
  metrics.learning_rate().Set(0.05);
  metrics.step_time(StepTime::kStep).Observe(0.002);
  metrics.generation.Set(3);
  std::string text = Text(registry);
  EXPECT_THAT(text, HasSubstr("tributary_worker_training_loss{job_id=\"job-1-aa\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("tributary_worker_learning_rate{job_id=\"job-1-aa\"} 0.05"));
  EXPECT_THAT(text, HasSubstr("tributary_worker_step_seconds_count{job_id=\"job-1-aa\"} 1"));
  EXPECT_THAT(text, HasSubstr("tributary_worker_test_accuracy{job_id=\"job-1-aa\"} -1"));
  EXPECT_THAT(text, HasSubstr("tributary_worker_generation 3"));
  for (const char* stage : {"step", "push_wait", "reduce", "parameters_wait", "forward", "backward",
                            "copy", "push"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("tributary_worker_", stage,
                                             "_seconds_count{job_id=\"job-1-aa\"}")));
  }

  // The next job: its own series, the earlier job's gone (a long-lived worker runs many).
  metrics.StartJob("job-2-bb");
  metrics.training_loss().Set(1.5);
  text = Text(registry);
  EXPECT_THAT(text, HasSubstr("tributary_worker_training_loss{job_id=\"job-2-bb\"} 1.5"));
  EXPECT_THAT(text, Not(HasSubstr("job-1-aa")));
  // The same job again (a new generation) keeps its series.
  metrics.step_time(StepTime::kStep).Observe(0.003);
  metrics.StartJob("job-2-bb");
  EXPECT_THAT(Text(registry),
              HasSubstr("tributary_worker_step_seconds_count{job_id=\"job-2-bb\"} 1"));
}

}  // namespace
}  // namespace tributary::worker
