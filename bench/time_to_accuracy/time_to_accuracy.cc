// time_to_accuracy: the local cluster (`tributary local`: a coordinator, P PS shards
// and W workers, the real binaries on loopback) against the single-process trainer
// (train_local) on the same job spec (model, batch, epochs, optimizer, seed), all run
// here as children one after the other: the cluster in the job's mode (SYNC by
// default), the cluster in LOCAL_SGD (unless --local_sgd=false), then train_local.
// Side by side: test accuracy, samples/s, training time, the time each takes to reach
// --target_accuracy, each as a ratio to train_local, and the clusters' communication
// shares of the step time (from the workers' /metrics histograms), the forward's wait
// for parameters among them. Ends with one JSON line.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/bench_json.h"
#include "bench/common/cluster_bench.h"
#include "bench/common/cpu_window.h"
#include "bench/common/local_sgd_run.h"
#include "bench/common/machine.h"
#include "bench/common/train_local_run.h"
#include "bench/common/training_run.h"
#include "bench/common/tributary_local_run.h"

ABSL_FLAG(int, workers, 2, "Cluster: worker processes (tributary local --workers). Default: 2.");
ABSL_FLAG(int, nodes, 0,
          "Cluster: node groups the workers are spread over (tributary local --nodes); 0 = one "
          "node per worker. Default: 0.");
ABSL_FLAG(int, local_replicas, 1,
          "Single process: train_local --replicas (in-process replicas the batch is split "
          "over). Default: 1.");
ABSL_FLAG(int, local_threads, 0,
          "Single process: train_local --threads (cores for matrix products; 0 = all). "
          "Default: 0.");
ABSL_FLAG(double, target_accuracy, 0.85,
          "Test accuracy whose time to reach is compared (seconds from the first step to "
          "the first evaluation at or above it); 0 = no target. Default: 0.85.");

namespace tributary::bench {
namespace {

constexpr char kUsage[] =
    "time_to_accuracy: tributary local (W workers, P PS shards) vs the single-process trainer\n"
    "on the same job: samples/s, accuracy, time to --target_accuracy, communication share.\n"
    "Usage: bazel run //bench/time_to_accuracy -- [--workers=2] [--ps_shards=2]\n"
    "       [--target_accuracy=0.85] [job flags]\n"
    "Job flags are tributary local's, with its defaults (mlp 784,256,128,10 on Fashion-MNIST,\n"
    "--batch=64, --epochs=3, --optimizer=momentum, --lr=0.05, cosine, 1 replica per worker):\n"
    "--model, --layers, --batch, --epochs, --max_steps, --optimizer, --lr, --train_limit, ...\n"
    "(--helpfull lists them all).";

// A cluster run against train_local, as JSON: samples/s, training time and time to the
// target as ratios.
std::string Ratios(const TrainingRun& run, const TrainingRun& single, double target) {
  return absl::StrCat(
      "{\"samples_per_second\": ", RatioJson(run.SamplesPerSecond(), single.SamplesPerSecond()),
      ", \"training_seconds\": ", RatioJson(run.training_seconds, single.training_seconds),
      ", \"seconds_to_target\": ",
      target > 0 ? RatioJson(run.SecondsTo(target), single.SecondsTo(target)) : "null", "}");
}

int Fail(const absl::Status& status) { return BenchFail("time_to_accuracy", status); }

int Run(const char* argv0) {
  absl::StatusOr<ClusterBench> bench = SetUpClusterBench(argv0, "time_to_accuracy");
  if (!bench.ok()) return Fail(bench.status());
  absl::StatusOr<std::string> train_local = bench->runfiles.Find("tributary/worker/train_local");
  if (!train_local.ok()) return Fail(train_local.status());
  const v1::JobSpec* spec = &bench->spec;
  const std::string* work_dir = &bench->work_dir;
  const std::string& job_json = bench->job_json;
  const double target = absl::GetFlag(FLAGS_target_accuracy);

  TributaryLocalOptions cluster_options;
  ApplyClusterFlags(bench->tributary, job_json, *work_dir + "/tributary-local", cluster_options);
  cluster_options.workers = absl::GetFlag(FLAGS_workers);
  cluster_options.nodes = absl::GetFlag(FLAGS_nodes);
  cluster_options.scrape_shards = true;  // The slowest worker's lag, from the shards.
  cluster_options.account_cpu = true;    // And where the cores went.
  cluster_options.name =
      absl::StrFormat("cluster %dWx%dR", cluster_options.workers, spec->replicas_per_worker());
  std::printf("running tributary local: %d workers x %u replicas, %d PS shards ...\n",
              cluster_options.workers, spec->replicas_per_worker(), cluster_options.ps_shards);
  std::fflush(stdout);
  absl::StatusOr<TrainingRun> cluster = RunTributaryLocal(cluster_options);
  if (!cluster.ok()) return Fail(cluster.status());

  // The same job in LOCAL_SGD: the nodes step on their own and average every H steps.
  v1::JobSpec local_sgd_spec;
  absl::StatusOr<std::optional<TrainingRun>> local_sgd_run =
      RunLocalSgdIfAsked(cluster_options, *spec, *work_dir, &local_sgd_spec);
  if (!local_sgd_run.ok()) return Fail(local_sgd_run.status());
  std::optional<TrainingRun>& local_sgd = *local_sgd_run;

  TrainLocalOptions local_options;
  local_options.binary = *train_local;
  local_options.job_json = job_json;
  local_options.log_path = *work_dir + "/train_local.log";
  local_options.replicas = absl::GetFlag(FLAGS_local_replicas);
  local_options.threads = absl::GetFlag(FLAGS_local_threads);
  local_options.name = absl::StrFormat("train_local %dR", local_options.replicas);
  std::printf("running train_local: %d replica(s) in one process ...\n", local_options.replicas);
  std::fflush(stdout);
  absl::StatusOr<TrainingRun> local = RunTrainLocal(local_options);
  if (!local.ok()) return Fail(local.status());

  const MachineInfo after = DescribeMachine();
  std::vector<const TrainingRun*> runs = {&*cluster};
  if (local_sgd.has_value()) runs.push_back(&*local_sgd);
  runs.push_back(&*local);  // Last: every ratio column divides by train_local.
  std::printf("\n%s", SideBySide(runs, target).c_str());
  std::printf("\naccuracy curve (test accuracy @ seconds since the first step):\n");
  for (const TrainingRun* run : runs) {
    std::printf("  %-16s %s\n", run->name.c_str(), AccuracyCurve(*run).c_str());
  }
  for (const TrainingRun* run : runs) {
    const StepTimes& times = run->step_times;
    if (run == &*local) continue;
    if (times.workers == 0) {
      std::printf("\n%s step time: no worker /metrics could be read\n", run->name.c_str());
      continue;
    }
    std::printf(
        "\n%s step time (%d workers, %llu worker-steps, mean %.4f s): %.1f%% waiting for "
        "the PS (push, aggregation over the nodes incl. waiting for the slowest, update, "
        "pull), %.1f%% intra-node reduction (overlaps backward), the next forward stood "
        "%.1f%% of the step waiting for parameters; the rest is forward/backward and "
        "bookkeeping. %s\n",
        run->name.c_str(), times.workers, static_cast<unsigned long long>(times.steps),
        times.MeanStepSeconds(), 100 * times.PushWaitShare(), 100 * times.ReduceShare(),
        100 * times.ParametersWaitShare(),
        times.SlowestWaitShare() < 0
            ? "(The shards' /metrics were not read: the slowest worker's lag is unknown.)"
            : absl::StrFormat("Behind the slowest worker: each step's last push waited %.1f%% "
                              "of a step for the slowest worker's (the shards' figure): that "
                              "much of the wait is the workers' skew, not the PS.",
                              100 * times.SlowestWaitShare())
                  .c_str());
    std::printf("%s", CpuUseLines(run->cpu).c_str());
  }
  std::printf("%s\n", LoadAverageAfterLine(after).c_str());
  std::printf(
      "{\"bench\": \"time_to_accuracy\", %s, "
      "\"job\": %s, \"workers\": %d, \"ps_shards\": %d, \"target_accuracy\": %.4f, "
      "\"cluster\": %s, \"single\": %s, \"ratios\": %s, \"local_sgd\": %s}\n",
      MachineJsonMembers(bench->machine, after).c_str(), JobSpecJson(*spec).c_str(),
      cluster_options.workers, cluster_options.ps_shards, target,
      TrainingRunJson(*cluster, target).c_str(), TrainingRunJson(*local, target).c_str(),
      Ratios(*cluster, *local, target).c_str(),
      local_sgd.has_value()
          ? absl::StrCat("{\"sync_every\": ", local_sgd_spec.sync_every(),
                         ", \"run\": ", TrainingRunJson(*local_sgd, target),
                         ", \"ratios\": ", Ratios(*local_sgd, *local, target), "}")
                .c_str()
          : "null");
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  return tributary::bench::BenchMain(argc, argv, tributary::bench::kUsage,
                                     tributary::bench::Run);
}
