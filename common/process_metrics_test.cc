#include "common/process_metrics.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "common/testing/prometheus_text.h"
#include "common/thread_name.h"

namespace tributary {
namespace {

// A stat line as the kernel writes it: fields 14/15 utime/stime, 20 threads, 22 start,
// 23 vsize, 24 rss.
std::string StatLine(const std::string& name, uint64_t utime, uint64_t stime, uint64_t start,
                     uint64_t threads = 1, uint64_t vsize = 0, uint64_t rss = 0) {
  return absl::StrCat("4242 (", name, ") S 1 4242 4242 0 -1 4194560 100 0 0 0 ", utime, " ",
                      stime, " 0 0 20 0 ", threads, " 0 ", start, " ", vsize, " ", rss,
                      " 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n");
}

std::string Status(uint64_t voluntary, uint64_t involuntary) {
  return absl::StrCat("Name:\tx\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t", voluntary,
                      "\nnonvoluntary_ctxt_switches:\t", involuntary, "\n");
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A fake /proc/self and /proc/stat under the test's temporary directory.
class FakeProc {
 public:
  explicit FakeProc(const std::string& name) {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    ::mkdir(root_.c_str(), 0755);
    ::mkdir((root_ + "/fd").c_str(), 0755);
    ::mkdir((root_ + "/task").c_str(), 0755);
    Write(root_ + "/proc_stat", "cpu  1 2 3 4\nbtime 1700000000\nprocesses 9\n");
  }
  ProcessCollector::Options options(int max_names = 64) const {
    ProcessCollector::Options options;
    options.proc_self = root_;
    options.proc_stat = root_ + "/proc_stat";
    options.max_thread_names = max_names;
    return options;
  }
  void Process(const std::string& text) { Write(root_ + "/stat", text); }
  void Fd(int fd) { Write(absl::StrCat(root_, "/fd/", fd), ""); }
  void Limits(const std::string& text) { Write(root_ + "/limits", text); }
  void Thread(int tid, const std::string& name, uint64_t ticks, uint64_t start,
              uint64_t voluntary = 0, uint64_t involuntary = 0) {
    const std::string dir = absl::StrCat(root_, "/task/", tid);
    ::mkdir(dir.c_str(), 0755);
    Write(dir + "/stat", StatLine(name, ticks, 0, start));
    Write(dir + "/status", Status(voluntary, involuntary));
  }
  void End(int tid) {
    const std::string dir = absl::StrCat(root_, "/task/", tid);
    std::remove((dir + "/stat").c_str());
    std::remove((dir + "/status").c_str());
    ::rmdir(dir.c_str());
  }

 private:
  std::string root_;
};

testing::ParsedMetrics Scrape(const ProcessCollector& collector) {
  const std::string text = prometheus::TextSerializer().Serialize(collector.Collect());
  absl::StatusOr<testing::ParsedMetrics> parsed = testing::ParsePrometheusText(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  return parsed.ok() ? *parsed : testing::ParsedMetrics();
}

double Ticks(uint64_t ticks) { return static_cast<double>(ticks) / ::sysconf(_SC_CLK_TCK); }

std::string Cpu(const std::string& thread) {
  return absl::StrCat("tributary_thread_cpu_seconds_total{thread=\"", thread, "\"}");
}

TEST(ParseProcStatTest, ReadsTheFieldsAfterTheLastParenthesis) {
  absl::StatusOr<ProcStat> stat =
      ParseProcStat(StatLine("a (b) c", 150, 50, 123456, 7, 1 << 20, 300));
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->name, "a (b) c");
  EXPECT_EQ(stat->utime_ticks, 150u);
  EXPECT_EQ(stat->stime_ticks, 50u);
  EXPECT_EQ(stat->threads, 7u);
  EXPECT_EQ(stat->start_ticks, 123456u);
  EXPECT_EQ(stat->vsize_bytes, 1u << 20);
  EXPECT_EQ(stat->rss_pages, 300u);
}

TEST(ParseProcStatTest, RefusesWhatIsNotAStatLineNamingWhy) {
  EXPECT_NE(ParseProcStat("no parentheses here").status().message().find("(name)"),
            std::string::npos);
  EXPECT_NE(ParseProcStat("1 (x) S 1 2 3").status().message().find("want 24"), std::string::npos);
  std::string line = StatLine("x", 1, 2, 3);
  line.replace(line.find(" 1 2 0 0 20"), 2, " z");  // utime not a number.
  absl::Status bad = ParseProcStat(line).status();
  EXPECT_NE(bad.message().find("field 14 is \"z\""), std::string::npos) << bad;
}

TEST(ParseContextSwitchesTest, ReadsBothOrRefuses) {
  absl::StatusOr<std::pair<uint64_t, uint64_t>> switches = ParseContextSwitches(Status(12, 3));
  ASSERT_TRUE(switches.ok()) << switches.status();
  EXPECT_EQ(switches->first, 12u);
  EXPECT_EQ(switches->second, 3u);
  EXPECT_FALSE(ParseContextSwitches("voluntary_ctxt_switches:\t4\n").ok());
  EXPECT_FALSE(ParseContextSwitches("voluntary_ctxt_switches:\tmany\n"
                                    "nonvoluntary_ctxt_switches:\t1\n")
                   .ok());
}

TEST(ThreadLabelTest, KeepsPrintableAsciiOnly) {
  EXPECT_EQ(ThreadLabel("lane-read"), "lane-read");
  EXPECT_EQ(ThreadLabel("a\"b\\c"), "a\"b\\c");  // The serializer escapes these.
  EXPECT_EQ(ThreadLabel("x\ny\x01z\xc3\xa9"), "x_y_z__");
  EXPECT_EQ(ThreadLabel(""), "_");
}

TEST(ProcessCollectorTest, TheProcessFigures) {
  FakeProc proc("process");
  proc.Process(StatLine("worker", 300, 100, 5000, 12, 8 << 20, 256));
  for (int fd : {0, 1, 2, 7}) proc.Fd(fd);
  proc.Limits(
      "Limit                     Soft Limit           Hard Limit           Units\n"
      "Max open files            4096                 524288               files\n");
  ProcessCollector collector(proc.options());
  testing::ParsedMetrics metrics = Scrape(collector);
  EXPECT_DOUBLE_EQ(metrics.samples["process_cpu_seconds_total"], Ticks(400));
  EXPECT_EQ(metrics.types["process_cpu_seconds_total"], "counter");
  EXPECT_DOUBLE_EQ(metrics.samples["process_resident_memory_bytes"],
                   256.0 * ::sysconf(_SC_PAGESIZE));
  EXPECT_DOUBLE_EQ(metrics.samples["process_virtual_memory_bytes"], 8 << 20);
  EXPECT_DOUBLE_EQ(metrics.samples["tributary_process_threads"], 12);
  EXPECT_DOUBLE_EQ(metrics.samples["process_start_time_seconds"], 1700000000 + Ticks(5000));
  EXPECT_DOUBLE_EQ(metrics.samples["process_open_fds"], 4);
  EXPECT_DOUBLE_EQ(metrics.samples["process_max_fds"], 4096);
}

TEST(ProcessCollectorTest, MissingOrBrokenFilesLeaveTheirFamiliesOut) {
  ProcessCollector::Options options;
  options.proc_self = absl::StrCat(std::getenv("TEST_TMPDIR"), "/no-such-proc");
  options.proc_stat = options.proc_self + "/stat";
  EXPECT_TRUE(ProcessCollector(options).Collect().empty());

  FakeProc proc("broken");
  proc.Process("garbage without a name\n");
  proc.Thread(10, "train", 5, 1);
  ProcessCollector collector(proc.options());
  testing::ParsedMetrics metrics = Scrape(collector);
  EXPECT_EQ(metrics.samples.count("process_cpu_seconds_total"), 0u);
  EXPECT_DOUBLE_EQ(metrics.samples[Cpu("train")], Ticks(5));  // The rest still answers.
}

TEST(ProcessCollectorTest, ThreadsByNameNeverGoDown) {
  FakeProc proc("threads");
  proc.Process(StatLine("worker", 1, 1, 1));
  proc.Thread(10, "train", 100, 1, 5, 2);
  proc.Thread(11, "push", 20, 2, 40, 1);
  proc.Thread(12, "push", 30, 2, 60, 0);
  ProcessCollector collector(proc.options());
  testing::ParsedMetrics first = Scrape(collector);
  EXPECT_DOUBLE_EQ(first.samples[Cpu("train")], Ticks(100));
  EXPECT_DOUBLE_EQ(first.samples[Cpu("push")], Ticks(50));  // Summed over the two.
  EXPECT_DOUBLE_EQ(first.samples["tributary_thread_context_switches_total{kind=\"voluntary\","
                                 "thread=\"push\"}"],
                   100);
  EXPECT_DOUBLE_EQ(first.samples["tributary_thread_context_switches_total{kind=\"involuntary\","
                                 "thread=\"train\"}"],
                   2);

  // Thread 12 ends: what it was last seen to use stays. Thread 10 renames itself: its
  // 100 ticks stay with "train", the next 7 go to "eval".
  proc.End(12);
  proc.Thread(10, "eval", 107, 1, 6, 2);
  proc.Thread(11, "push", 25, 2, 41, 1);
  testing::ParsedMetrics second = Scrape(collector);
  EXPECT_DOUBLE_EQ(second.samples[Cpu("push")], Ticks(55));
  EXPECT_DOUBLE_EQ(second.samples[Cpu("train")], Ticks(100));
  EXPECT_DOUBLE_EQ(second.samples[Cpu("eval")], Ticks(7));

  // A new thread under a reused tid (another start time) counts from its own zero.
  proc.Thread(11, "push", 3, 9);
  testing::ParsedMetrics third = Scrape(collector);
  EXPECT_DOUBLE_EQ(third.samples[Cpu("push")], Ticks(58));
  for (const auto& [sample, value] : second.samples) {
    if (sample.rfind("tributary_thread_", 0) == 0) {
      EXPECT_GE(third.samples[sample], value) << sample;
    }
  }
}

TEST(ProcessCollectorTest, NamesPastTheLimitCountAsOther) {
  FakeProc proc("many");
  proc.Process(StatLine("worker", 1, 1, 1));
  proc.Thread(10, "a", 1, 1);
  proc.Thread(11, "b", 2, 1);
  proc.Thread(12, "c", 4, 1);
  proc.Thread(13, "d\x01", 8, 1);
  ProcessCollector collector(proc.options(/*max_names=*/2));
  testing::ParsedMetrics metrics = Scrape(collector);
  EXPECT_DOUBLE_EQ(metrics.samples[Cpu("a")], Ticks(1));
  EXPECT_DOUBLE_EQ(metrics.samples[Cpu("b")], Ticks(2));
  EXPECT_DOUBLE_EQ(metrics.samples[Cpu("other")], Ticks(12));
  EXPECT_EQ(metrics.samples.count(Cpu("c")), 0u);
}

TEST(ProcessCollectorTest, ThisProcessAndABusyThreadOfIt) {
  ProcessCollector collector;
  testing::ParsedMetrics before = Scrape(collector);
  EXPECT_GT(before.samples["process_open_fds"], 0);
  EXPECT_GT(before.samples["process_resident_memory_bytes"], 0);
  EXPECT_GT(before.samples["process_start_time_seconds"], 1.5e9);
  EXPECT_LE(before.samples["process_start_time_seconds"], static_cast<double>(std::time(nullptr)) + 1);
  // A named thread seen while it burns at least 0.2 s of CPU counts under its name.
  std::atomic<bool> stop{false};
  std::atomic<bool> spun{false};
  std::thread seen([&] {
    NameThisThread("metrics-spin");
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    const double start = t.tv_sec + t.tv_nsec * 1e-9;
    volatile uint64_t sink = 0;
    while (!stop.load()) {
      sink = sink + 1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      if (t.tv_sec + t.tv_nsec * 1e-9 - start >= 0.2) spun.store(true);
    }
  });
  while (!spun.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  testing::ParsedMetrics during = Scrape(collector);
  stop.store(true);
  seen.join();
  testing::ParsedMetrics after = Scrape(collector);
  EXPECT_GE(during.samples["process_cpu_seconds_total"] - before.samples["process_cpu_seconds_total"],
            0.15);
  EXPECT_GE(during.samples[Cpu("metrics-spin")], 0.1);
  EXPECT_GE(after.samples[Cpu("metrics-spin")], during.samples[Cpu("metrics-spin")]);
}

}  // namespace
}  // namespace tributary
