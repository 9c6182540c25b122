// scaling: the same job on `tributary local` with W = 1, 2, 4 workers (strong
// scaling: the global batch stays, each worker's share shrinks), one run after the
// other: samples/s and its ratio to the first W, the step time and its communication
// share (the workers' /metrics histograms), test accuracy. On a machine with fewer
// cores than replicas, adding workers adds no compute: the table shows what that costs.
// Ends with one JSON line.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/bench_json.h"
#include "bench/common/cluster_bench.h"
#include "bench/common/machine.h"
#include "bench/common/training_run.h"
#include "bench/common/tributary_local_run.h"
#include "common/job_flags.h"

ABSL_FLAG(std::vector<std::string>, worker_counts, std::vector<std::string>({"1", "2", "4"}),
          "Worker processes of each run (tributary local --workers), comma separated; ratios "
          "are to the first. Default: 1,2,4.");

namespace tributary::bench {
namespace {

constexpr char kUsage[] =
    "scaling: samples/s of one job on tributary local for each --worker_counts (default\n"
    "1,2,4), with the ratio to the first, step time and communication share.\n"
    "Usage: bazel run //bench/scaling -- [--worker_counts=1,2,4] [--ps_shards=2] [job flags]\n"
    "Job flags are tributary local's, with its defaults (mlp 784,256,128,10 on Fashion-MNIST,\n"
    "--batch=64, --optimizer=momentum, --lr=0.05, cosine, 1 replica per worker) except --epochs,\n"
    "which is 1 here unless given (--helpfull lists them all).";

int Fail(const absl::Status& status) { return BenchFail("scaling", status); }

int Run(const char* argv0) {
  std::vector<int> counts;
  for (const std::string& text : absl::GetFlag(FLAGS_worker_counts)) {
    int count = 0;
    if (!absl::SimpleAtoi(text, &count) || count < 1) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--worker_counts=", absl::StrJoin(absl::GetFlag(FLAGS_worker_counts), ","),
                       ": '", text, "' is not a positive integer")));
    }
    counts.push_back(count);
  }
  if (counts.empty()) return Fail(absl::InvalidArgumentError("--worker_counts: none given"));
  absl::StatusOr<ClusterBench> bench = SetUpClusterBench(argv0, "scaling", [](v1::JobSpec& spec) {
    if (!FlagGiven("epochs")) spec.set_epochs(1);
  });
  if (!bench.ok()) return Fail(bench.status());
  const v1::JobSpec* spec = &bench->spec;

  std::vector<TrainingRun> runs;
  int ps_shards = 0;
  for (int workers : counts) {
    TributaryLocalOptions options;
    ApplyClusterFlags(bench->tributary, bench->job_json,
                      absl::StrCat(bench->work_dir, "/workers-", workers), options);
    options.workers = workers;
    ps_shards = options.ps_shards;
    // More workers than cores is what this benchmark measures the cost of.
    options.extra_args.push_back("--oversubscribe");
    options.name = absl::StrCat("W=", workers);
    std::printf("running tributary local: %d worker(s) x %u replicas, %d PS shards ...\n", workers,
                spec->replicas_per_worker(), options.ps_shards);
    std::fflush(stdout);
    absl::StatusOr<TrainingRun> run = RunTributaryLocal(options);
    if (!run.ok()) {
      return Fail(absl::Status(run.status().code(),
                               absl::StrCat(workers, " workers: ", run.status().message())));
    }
    runs.push_back(*std::move(run));
  }
  const MachineInfo after = DescribeMachine();

  const TrainingRun& base = runs.front();
  std::printf("\n%7s %8s %12s %7s %12s %7s %10s %8s %8s %9s %10s\n", "workers", "replicas",
              "samples/s", "ratio", "reported/s", "ratio", "step s", "PS wait", "reduce",
              "test acc", "training s");
  std::vector<std::string> json_runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    const TrainingRun& run = runs[i];
    const StepTimes& t = run.step_times;
    const unsigned replicas = counts[i] * spec->replicas_per_worker();
    std::printf(
        "%7d %8u %12.0f %7s %12.0f %7s %10.4f %7.1f%% %7.1f%% %9.4f %10.1f\n", counts[i], replicas,
        run.SamplesPerSecond(),
        RatioJson(run.SamplesPerSecond(), base.SamplesPerSecond(), 3).c_str(),
        run.reported_samples_per_second,
        RatioJson(run.reported_samples_per_second, base.reported_samples_per_second, 3).c_str(),
        t.MeanStepSeconds(), 100 * t.PushWaitShare(), 100 * t.ReduceShare(), run.test_accuracy,
        run.training_seconds);
    json_runs.push_back(absl::StrFormat(
        "{\"workers\": %d, \"replicas\": %u, \"ratio_samples_per_second\": %s, "
        "\"ratio_reported_samples_per_second\": %s, \"run\": %s}",
        counts[i], replicas, RatioJson(run.SamplesPerSecond(), base.SamplesPerSecond(), 3),
        RatioJson(run.reported_samples_per_second, base.reported_samples_per_second, 3),
        TrainingRunJson(run, 0)));
  }
  std::printf(
      "\nsamples/s: steps x batch over the training wall time (first step to completion, "
      "evaluations included); reported/s: the workers' own step-time throughput as the "
      "coordinator averaged it; step s, PS wait, reduce: the workers' /metrics histograms.\n");
  const unsigned most = counts.back() * spec->replicas_per_worker();
  if (most > bench->machine.cpu_cores) {
    std::printf(
        "note: up to %u replicas share %u CPU cores. Forward/backward already keeps every core "
        "busy with one worker, so more workers add no compute: each does a smaller share of the "
        "same batch while the PS traffic (the whole model per node per step) and the "
        "processes' scheduling grow. This is a CPU-bound machine; the figures say what the "
        "system costs, not how it scales on more cores.\n",
        most, bench->machine.cpu_cores);
  }
  std::printf("%s\n", LoadAverageAfterLine(after).c_str());
  absl::PrintF(
      "{\"bench\": \"scaling\", %s, \"job\": %s, "
      "\"ps_shards\": %d, \"runs\": [%s]}\n",
      MachineJsonMembers(bench->machine, after), JobSpecJson(*spec), ps_shards,
      absl::StrJoin(json_runs, ", "));
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  return tributary::bench::BenchMain(argc, argv, tributary::bench::kUsage,
                                     tributary::bench::Run);
}
