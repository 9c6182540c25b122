// step_breakdown: where a training step goes. In one run on this machine it measures
//   1. the engine's compute-only throughput for the job's model on --device: one
//      replica, forward+backward alone (engine_bench's figure; no data loading, no
//      reduction, no parameter server);
//   2. the local cluster (`tributary local`: W workers, P PS shards, the real binaries
//      on loopback) on the same job in its mode (SYNC by default) and, unless
//      --local_sgd=false, in LOCAL_SGD;
// and prints each cluster run's samples/s as a fraction of (1), and the share of a
// worker step spent in each stage (forward, backward, host<->device copies, push,
// intra-node reduction, waiting for the update, the shards' optimizer apply, the
// forward standing still for parameters), from the workers' and the shards' /metrics
// histograms, and where the cores went meanwhile (the CPU per job step of the workers,
// the shards and the coordinator and of their threads by name, their context switches,
// the machine's busy and idle shares: bench/common/cpu_window.h). Ends with one JSON
// line.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/bench_json.h"
#include "bench/common/cluster_bench.h"
#include "bench/common/cpu_window.h"
#include "bench/common/local_sgd_run.h"
#include "bench/common/compute_only.h"
#include "bench/common/machine.h"
#include "bench/common/training_run.h"
#include "bench/common/tributary_local_run.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/model_registry.h"

ABSL_FLAG(int, workers, 1, "Cluster: worker processes (tributary local --workers). Default: 1.");
ABSL_FLAG(std::string, device, "cpu",
          "cpu or gpu: where the replicas compute, in the cluster (gpu: tributary local "
          "--devices=gpu --job_devices=gpu, one GPU per replica) and in the compute-only "
          "measurement. Default: cpu.");
ABSL_FLAG(double, min_seconds, 2.0,
          "Compute-only: time the forward+backward for at least this long (best of 5 "
          "windows). Default: 2.0.");

namespace tributary::bench {
namespace {

constexpr char kUsage[] =
    "step_breakdown: the local cluster's samples/s as a fraction of the engine's compute-only\n"
    "figure on the same device, and the share of a step in each stage, measured in one run.\n"
    "Usage: bazel run -c opt //bench/step_breakdown -- [--device=cpu|gpu] [--workers=1]\n"
    "       [--ps_shards=2] [--local_sgd_sync_every=64] [job flags]\n"
    "Job flags are tributary local's, with its defaults (mlp 784,256,128,10 on Fashion-MNIST,\n"
    "--batch=64, --epochs=3, --optimizer=momentum, --lr=0.05, cosine, 1 replica per worker).";

int Fail(const absl::Status& status) { return BenchFail("step_breakdown", status); }

// The ceiling the cluster is measured against: on a GPU one replica per device, each
// at its share of the batch; on the CPU the replicas share the cores, so one replica at
// the whole batch on every core.
struct Ceiling {
  ComputeOnly measured;
  int replicas = 1;  // Devices computing at once (GPU).
  double samples_per_second() const { return measured.samples_per_second * replicas; }
  std::string What() const {
    return replicas > 1 ? absl::StrFormat("%d x one replica on %s at batch %d", replicas,
                                          measured.device, measured.batch)
                        : absl::StrFormat("one replica on %s at batch %d", measured.device,
                                          measured.batch);
  }
};

absl::StatusOr<Ceiling> MeasureCeiling(const v1::JobSpec& spec, const std::string& device,
                                       int workers) {
  if (spec.model().name() == "torchscript") {
    return absl::UnimplementedError(
        "compute-only is measured for the engine's own models (mlp, cnn, logreg), not for a "
        "TorchScript file");
  }
  absl::StatusOr<engine::ModelDef> model = engine::BuildModel(spec.model());
  if (!model.ok()) return model.status();
  Ceiling ceiling;
  const int replicas = workers * static_cast<int>(std::max(1u, spec.replicas_per_worker()));
  int batch = static_cast<int>(spec.global_batch_size());
  if (device == "gpu") {
    ceiling.replicas = replicas;
    batch = std::max(1, batch / replicas);
  }
  engine::SetCpuMatmulThreads(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  absl::StatusOr<ComputeOnly> measured =
      MeasureComputeOnly(*model, device, batch, absl::GetFlag(FLAGS_min_seconds));
  if (!measured.ok()) return measured.status();
  ceiling.measured = *measured;
  return ceiling;
}

// One stage's share of the step, as "12.3%".
std::string Percent(double share) {
  return share < 0 ? "n/a" : absl::StrFormat("%.1f%%", 100 * share);
}

void PrintStages(const TrainingRun& run) {
  const StepTimes& t = run.step_times;
  if (t.workers == 0) {
    std::printf("\n%s: no worker /metrics could be read\n", run.name.c_str());
    return;
  }
  // Never below 0 (the forward subtracts its own replica's wait, the table shows the
  // longest of any replica).
  const double other = std::max(
      0.0,
      t.Share(t.step_seconds - t.forward_seconds - t.backward_seconds - t.parameters_wait_seconds));
  std::printf(
      "\n%s: %llu worker-steps, mean step %.3f ms%s; share of a step:\n"
      "  on the training thread (these add up to the step):\n"
      "    forward                          %7s\n"
      "    backward                         %7s\n"
      "    forward waiting for parameters   %7s   (the update the overlap did not hide)\n"
      "    the rest                         %7s   (batch gathering, waiting for the last "
      "pushes;\n"
      "                                               LOCAL_SGD inside a round: the inner step)\n"
      "  beside it (overlapping the above):\n"
      "    host<->device copies             %7s\n"
      "    push (handing partitions over)   %7s\n"
      "    intra-node reduction             %7s\n"
      "    waiting for the update           %7s   (PS aggregation, apply and pull, on the "
      "communication thread)\n"
      "    PS optimizer apply               %7s   (summed over the shards, per job step)\n"
      "    last push behind the slowest's   %7s   (the shards' wait of each node's last push "
      "for the step's slowest, per worker-step)\n",
      run.name.c_str(), static_cast<unsigned long long>(t.steps), 1000 * t.MeanStepSeconds(),
      run.partition_cut.empty() ? "" : absl::StrCat(", partition cut ", run.partition_cut).c_str(),
      Percent(t.Share(t.forward_seconds)).c_str(), Percent(t.Share(t.backward_seconds)).c_str(),
      Percent(t.ParametersWaitShare()).c_str(), Percent(other).c_str(),
      Percent(t.Share(t.copy_seconds)).c_str(), Percent(t.Share(t.push_seconds)).c_str(),
      Percent(t.ReduceShare()).c_str(), Percent(t.PushWaitShare()).c_str(),
      Percent(t.PsApplyShare()).c_str(), Percent(t.SlowestWaitShare()).c_str());
  std::printf("%s", CpuUseLines(run.cpu).c_str());
}

std::string RunJson(const TrainingRun& run, const std::optional<Ceiling>& ceiling) {
  return absl::StrCat(
      "{\"run\": ", TrainingRunJson(run, 0), ", \"of_compute_only\": ",
      ceiling.has_value() ? RatioJson(run.SamplesPerSecond(), ceiling->samples_per_second())
                          : "null",
      ", \"reported_of_compute_only\": ",
      ceiling.has_value()
          ? RatioJson(run.reported_samples_per_second, ceiling->samples_per_second())
          : "null",
      "}");
}

int Run(const char* argv0) {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "gpu") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or gpu, got \"", device, "\"")));
  }
  absl::StatusOr<ClusterBench> bench = SetUpClusterBench(argv0, "step_breakdown");
  if (!bench.ok()) return Fail(bench.status());
  const v1::JobSpec* spec = &bench->spec;
  const int workers = absl::GetFlag(FLAGS_workers);
  std::printf("measuring the engine's compute-only throughput on %s ...\n", device.c_str());
  std::fflush(stdout);
  std::optional<Ceiling> ceiling;
  if (absl::StatusOr<Ceiling> measured = MeasureCeiling(*spec, device, workers); measured.ok()) {
    ceiling = *measured;
    std::printf("compute-only: %.0f samples/s (%s)\n", ceiling->samples_per_second(),
                ceiling->What().c_str());
  } else if (absl::IsUnimplemented(measured.status())) {
    std::printf("compute-only: not measured: %s\n", measured.status().message().data());
  } else {
    return Fail(measured.status());
  }

  TributaryLocalOptions options;
  ApplyClusterFlags(bench->tributary, bench->job_json, bench->work_dir + "/tributary-local",
                    options);
  options.scrape_shards = true;  // For the PS apply share.
  options.account_cpu = true;    // Where the cores went.
  options.workers = workers;
  if (device == "gpu") {
    options.extra_args.insert(options.extra_args.begin(),
                              {"--devices=gpu", "--job_devices=gpu"});
  }
  options.name = absl::StrFormat("%s %s", v1::TrainingMode_Name(spec->mode()), device);
  std::printf("running tributary local: %d worker(s) x %u replica(s) on %s, %d PS shards ...\n",
              workers, spec->replicas_per_worker(), device.c_str(), options.ps_shards);
  std::fflush(stdout);
  absl::StatusOr<TrainingRun> cluster = RunTributaryLocal(options);
  if (!cluster.ok()) return Fail(cluster.status());
  std::vector<TrainingRun> runs = {*std::move(cluster)};
  v1::JobSpec local_sgd_spec;
  absl::StatusOr<std::optional<TrainingRun>> local_sgd =
      RunLocalSgdIfAsked(options, *spec, bench->work_dir, &local_sgd_spec);
  if (!local_sgd.ok()) return Fail(local_sgd.status());
  if (local_sgd->has_value()) {
    (*local_sgd)->name = absl::StrCat((*local_sgd)->name, " ", device);
    runs.push_back(**std::move(local_sgd));
  }

  const MachineInfo after = DescribeMachine();
  std::printf("\n%-22s %12s %12s %12s %10s\n", "run", "samples/s", "as reported",
              "of compute", "accuracy");
  if (ceiling.has_value()) {
    std::printf("%-22s %12.0f %12s %12s %10s\n", "compute-only", ceiling->samples_per_second(),
                "", "1", "");
  }
  std::vector<std::string> json_runs;
  for (const TrainingRun& run : runs) {
    std::printf("%-22s %12.0f %12.0f %12s %10.4f\n", run.name.c_str(), run.SamplesPerSecond(),
                run.reported_samples_per_second,
                ceiling.has_value()
                    ? absl::StrFormat("%.3f", run.SamplesPerSecond() /
                                                  ceiling->samples_per_second())
                          .c_str()
                    : "n/a",
                run.test_accuracy);
    json_runs.push_back(RunJson(run, ceiling));
  }
  std::printf("(samples/s: steps x batch over the training time, evaluations included; as "
              "reported: the coordinator's figure over step time)\n");
  for (const TrainingRun& run : runs) PrintStages(run);
  std::printf("%s\n", LoadAverageAfterLine(after).c_str());
  std::printf(
      "{\"bench\": \"step_breakdown\", %s, \"device\": \"%s\", \"job\": %s, \"workers\": %d, "
      "\"ps_shards\": %d, \"compute_only\": %s, \"runs\": [%s]}\n",
      MachineJsonMembers(bench->machine, after).c_str(), device.c_str(), JobSpecJson(*spec).c_str(),
      workers, options.ps_shards,
      ceiling.has_value()
          ? absl::StrFormat("{\"samples_per_second\": %.1f, \"device\": \"%s\", \"batch\": %d, "
                            "\"replicas\": %d}",
                            ceiling->samples_per_second(), ceiling->measured.device,
                            ceiling->measured.batch, ceiling->replicas)
                .c_str()
          : "null",
      absl::StrJoin(json_runs, ", ").c_str());
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  return tributary::bench::BenchMain(argc, argv, tributary::bench::kUsage,
                                     tributary::bench::Run);
}
