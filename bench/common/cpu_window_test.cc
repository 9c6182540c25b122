#include "bench/common/cpu_window.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "bench/common/cpu_reading.h"
#include "common/testing/prometheus_text.h"

namespace tributary::bench {
namespace {

testing::ParsedMetrics Worker(double cpu, double train, double push, double steps,
                              double voluntary, double involuntary) {
  testing::ParsedMetrics metrics;
  metrics.samples = {
      {"process_cpu_seconds_total", cpu},
      {"process_cpu_seconds_total_other", 1000},  // Another metric: not read.
      {"tributary_thread_cpu_seconds_total{thread=\"train\"}", train},
      {"tributary_thread_cpu_seconds_total{thread=\"push\"}", push},
      {"tributary_thread_cpu_seconds_total{thread=\"a\\\"b\"}", 0},
      {"tributary_thread_context_switches_total{kind=\"voluntary\",thread=\"push\"}", voluntary},
      {"tributary_thread_context_switches_total{kind=\"involuntary\",thread=\"train\"}",
       involuntary},
      {"tributary_worker_step_seconds_count{job_id=\"j\"}", steps},
  };
  return metrics;
}

testing::ParsedMetrics Shard(double cpu, double read) {
  testing::ParsedMetrics metrics;
  metrics.samples = {{"process_cpu_seconds_total", cpu},
                     {"tributary_thread_cpu_seconds_total{thread=\"shard-read\"}", read}};
  return metrics;
}

TEST(MachineTicksTest, ParsesTheCpuLineOrSaysWhy) {
  absl::StatusOr<MachineTicks> ticks =
      ParseMachineTicks("cpu  100 5 40 300 2 1 3 0 0 0\ncpu0 50 2 20 150 1 0 1 0 0 0\n");
  ASSERT_TRUE(ticks.ok()) << ticks.status();
  EXPECT_EQ(ticks->user, 100u);
  EXPECT_EQ(ticks->idle, 300u);
  EXPECT_EQ(ticks->softirq, 3u);
  EXPECT_EQ(ticks->Total(), 451u);
  EXPECT_FALSE(ParseMachineTicks("intr 1 2 3").ok());
  EXPECT_NE(ParseMachineTicks("cpu 1 2 x 4").status().message().find("field 3 is \"x\""),
            std::string::npos);
  EXPECT_FALSE(ParseMachineTicks("cpu 1 2").ok());
  EXPECT_TRUE(ReadMachineTicks().has_value());  // This machine's.
}

CpuSnapshot Reading(absl::Time at, double scale, uint64_t steps, MachineTicks machine) {
  CpuSnapshot snapshot;
  snapshot.at = at;
  AddProcess("worker", Worker(4 * scale, 3 * scale, 0.5 * scale, steps, 10 * scale, 4 * scale),
             snapshot);
  AddProcess("worker", Worker(4 * scale, 3 * scale, 0.5 * scale, steps, 10 * scale, 4 * scale),
             snapshot);
  AddProcess("shard", Shard(scale, 0.8 * scale), snapshot);
  snapshot.machine = machine;
  return snapshot;
}

TEST(CpuWindowTest, PerJobStepBetweenTwoReadings) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  MachineTicks early;
  early.user = 100;
  early.system = 50;
  early.idle = 50;
  MachineTicks late = early;
  late.user += 300;  // 400 ticks of 2 cores over 2 s: 75% user, 25% idle.
  late.idle += 100;
  const CpuSnapshot first = Reading(start, 1, 100, early);
  const CpuSnapshot last = Reading(start + absl::Seconds(2), 2, 1100, late);
  EXPECT_EQ(first.worker_steps, 200u);
  absl::StatusOr<CpuUse> use = CpuBetween(first, last, /*cores=*/2);
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_DOUBLE_EQ(use->job_steps, 1000);  // 2,000 worker-steps of 2 workers.
  EXPECT_DOUBLE_EQ(use->seconds, 2);
  // Each worker's process went from 4 to 8 s: 8 s over 1,000 steps.
  EXPECT_DOUBLE_EQ(use->PerStepMs(use->process_seconds["worker"]), 8);
  EXPECT_DOUBLE_EQ(use->PerStepMs(use->process_seconds["shard"]), 1);
  EXPECT_DOUBLE_EQ(use->PerStepMs(use->thread_seconds[{"worker", "train"}]), 6);
  EXPECT_DOUBLE_EQ(use->PerStepMs(use->thread_seconds[{"shard", "shard-read"}]), 0.8);
  EXPECT_EQ(use->thread_seconds.count({"worker", "a\"b"}), 0u);  // Spent nothing.
  EXPECT_DOUBLE_EQ(use->voluntary, 20);
  EXPECT_DOUBLE_EQ(use->involuntary, 8);
  EXPECT_DOUBLE_EQ(use->machine_user, 0.75);
  EXPECT_DOUBLE_EQ(use->machine_idle, 0.25);
  EXPECT_DOUBLE_EQ(use->machine_busy, 0.75);
  EXPECT_DOUBLE_EQ(use->machine_system, 0);

  const std::string lines = CpuUseLines(*use, /*threads=*/1);
  // 9 ms of CPU per step against 2 cores x 2 ms: 225%.
  EXPECT_NE(lines.find("workers            8.000 ms   train 6.000, other 2.000"),
            std::string::npos)
      << lines;
  EXPECT_NE(lines.find("PS shards          1.000 ms   shard-read 0.800, other 0.200"),
            std::string::npos)
      << lines;
  EXPECT_NE(lines.find("of the 2 cores' 4.000 ms per step: 225%"), std::string::npos) << lines;
  EXPECT_NE(lines.find("75%   busy (user 75%, system 0%), idle 25%"), std::string::npos) << lines;
  EXPECT_NE(lines.find("0.0 voluntary"), std::string::npos) << lines;  // 20 over 1,000 steps.

  const std::string json = CpuUseJson(*use);
  EXPECT_NE(json.find("\"ms_per_step\": {\"shard\": 1.0000, \"worker\": 8.0000}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"worker/train\": 6.0000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"machine_idle\": 0.2500"), std::string::npos) << json;
}

TEST(CpuWindowTest, RefusesReadingsThatCannotBeCompared) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  const CpuSnapshot first = Reading(start, 1, 100, MachineTicks());
  CpuSnapshot fewer;
  AddProcess("worker", Worker(8, 6, 1, 900, 0, 0), fewer);
  absl::Status different = CpuBetween(first, fewer, 2).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(different)) << different;
  EXPECT_NE(different.message().find("1 shard, 2 worker against 1 worker"), std::string::npos)
      << different;
  EXPECT_TRUE(absl::IsFailedPrecondition(CpuBetween(first, first, 2).status()));
  // Without the machine's ticks the shares stay unread.
  absl::StatusOr<CpuUse> use = CpuBetween(first, Reading(start + absl::Seconds(1), 2, 200,
                                                         MachineTicks()), 2);
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_LT(use->machine_busy, 0);
  EXPECT_EQ(CpuUseLines(*use).find("the machine"), std::string::npos);
  EXPECT_EQ(CpuUseLines(CpuUse()), "");
  EXPECT_EQ(CpuUseJson(CpuUse()), "null");
}

}  // namespace
}  // namespace tributary::bench
