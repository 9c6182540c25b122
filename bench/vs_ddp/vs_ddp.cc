// vs_ddp: the local cluster (`tributary local`, the real binaries on loopback) against
// PyTorch DistributedDataParallel (gloo backend, processes on loopback, ddp_mlp.py run
// by /usr/bin/python3) training the same MLP with the same batch, epochs, optimizer
// and learning rate from one job spec: accuracy, samples/s, training time, time to
// --target_accuracy side by side, one after the other on this machine. Skipped, with
// the reason, when /usr/bin/python3 cannot import torch (bash scripts/setup installs
// Debian's python3-torch). With --model_file both sides train that TorchScript file.
// Ends with one JSON line.

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/common/bench_json.h"
#include "bench/common/bench_runfiles.h"
#include "bench/common/cluster_bench.h"
#include "bench/common/local_sgd_run.h"
#include "bench/common/machine.h"
#include "bench/common/run_to_end.h"
#include "bench/common/training_run.h"
#include "bench/common/tributary_local_run.h"
#include "common/child_process.h"
#include "common/job_flags.h"
#include "common/tls.h"

// The job flag (cli/job_flags.cc): a TorchScript file both sides train.
ABSL_DECLARE_FLAG(std::string, model_file);

ABSL_FLAG(int, workers, 2,
          "Worker processes of tributary local, and DDP processes unless --ddp_processes is "
          "given. Default: 2.");
ABSL_FLAG(int, ddp_processes, 0, "DDP: processes (world size); 0 = --workers. Default: 0.");
ABSL_FLAG(int, ddp_threads, 0,
          "DDP: torch (and OpenBLAS) threads per process; 0 = CPU cores / processes, at "
          "least 1. Default: 0.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "DDP: the Python that runs ddp_mlp.py (needs torch and numpy). Default: "
          "/usr/bin/python3.");
ABSL_FLAG(double, target_accuracy, 0.85,
          "Test accuracy whose time to reach is compared (seconds from the first step to the "
          "first evaluation at or above it); 0 = no target. Default: 0.85.");

namespace tributary::bench {
namespace {

constexpr char kUsage[] =
    "vs_ddp: tributary local vs PyTorch DistributedDataParallel (gloo, processes on loopback)\n"
    "on the same MLP, batch, epochs, optimizer and learning rate.\n"
    "Usage: bazel run //bench/vs_ddp -- [--workers=2] [--ddp_processes=N] [--ddp_threads=N]\n"
    "       [--target_accuracy=0.85] [job flags]\n"
    "Needs torch for /usr/bin/python3 (bash scripts/setup); skipped otherwise.\n"
    "Job flags are tributary local's, with its defaults (mlp 784,256,128,10 on Fashion-MNIST,\n"
    "--batch=64, --epochs=3, --optimizer=momentum, --lr=0.05, cosine, 1 replica per worker);\n"
    "the PyTorch side mirrors mlp on IDX data in SYNC mode only (--helpfull lists them all).\n"
    "With --model_file=net.pt both sides train that TorchScript file (DDP loads it with\n"
    "torch.jit.load).";

int Fail(const absl::Status& status) { return BenchFail("vs_ddp", status); }

struct DdpRun {
  TrainingRun run;
  std::string blas;
  double sgemm_gflops = 0;
  std::string torch_version;
};

absl::StatusOr<DdpRun> ParseDdp(const std::string& log_path, double process_seconds,
                                const std::string& name) {
  const std::string what = "ddp_mlp output " + log_path;
  absl::StatusOr<std::string> text = ReadFileToString(log_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::string> line = LastJsonLine(*text, what);
  if (!line.ok()) return line.status();
  absl::StatusOr<google::protobuf::Struct> json = ParseJsonObject(*line, what);
  if (!json.ok()) return json.status();
  DdpRun ddp;
  TrainingRun& run = ddp.run;
  run.name = name;
  run.log_path = log_path;
  run.process_seconds = process_seconds;
  double steps = 0, samples = 0;
  const absl::Status read = JsonNumbers(
      *json,
      {JsonField{"test_accuracy", &run.test_accuracy}, JsonField{"final_loss", &run.final_loss},
       JsonField{"steps", &steps}, JsonField{"samples", &samples},
       JsonField{"reported_samples_per_second", &run.reported_samples_per_second},
       JsonField{"training_seconds", &run.training_seconds},
       JsonField{"setup_seconds", &run.setup_seconds},
       JsonField{"sgemm_gflops_per_process", &ddp.sgemm_gflops}},
      what);
  if (!read.ok()) return read;
  run.steps = static_cast<uint64_t>(steps);
  run.samples = static_cast<uint64_t>(samples);
  absl::StatusOr<std::string> blas = JsonString(*json, "blas", what);
  if (!blas.ok()) return blas.status();
  ddp.blas = *blas;
  absl::StatusOr<std::string> version = JsonString(*json, "torch_version", what);
  if (!version.ok()) return version.status();
  ddp.torch_version = *version;
  auto evaluations = json->fields().find("evaluations");
  if (evaluations == json->fields().end() || !evaluations->second.has_list_value()) {
    return absl::NotFoundError(absl::StrCat(what, ": no 'evaluations' list"));
  }
  for (const google::protobuf::Value& value : evaluations->second.list_value().values()) {
    if (!value.has_struct_value()) continue;
    Evaluation evaluation;
    double step = 0;
    const absl::Status read_evaluation =
        JsonNumbers(value.struct_value(),
                    {JsonField{"step", &step}, JsonField{"accuracy", &evaluation.accuracy},
                     JsonField{"seconds", &evaluation.seconds}},
                    what);
    if (!read_evaluation.ok()) return read_evaluation;
    evaluation.step = static_cast<uint64_t>(step);
    run.evaluations.push_back(evaluation);
  }
  return ddp;
}

int Run(const char* argv0) {
  const MachineInfo machine = DescribeMachine();
  absl::StatusOr<std::string> work_dir = WorkDirFromFlags("vs_ddp");
  if (!work_dir.ok()) return Fail(work_dir.status());
  const std::string python = absl::GetFlag(FLAGS_python);

  // Skip, saying why, when torch is not there: an optional comparison.
  const std::string check_log = *work_dir + "/torch_check.log";
  absl::StatusOr<int> imported =
      RunToEnd("torch check", {python, "-c", "import numpy, torch"}, check_log, nullptr);
  if (!imported.ok() || *imported != 0) {
    const std::string why =
        imported.ok()
            ? absl::StrCat(python, " cannot import numpy and torch: ", LastLine(check_log))
            : std::string(imported.status().message());
    std::printf(
        "vs_ddp: skipped: %s. Install Debian's python3-torch with `bash scripts/setup`.\n",
        why.c_str());
    absl::PrintF("{\"bench\": \"vs_ddp\", \"skipped\": true, \"reason\": %s, %s}\n", JsonQuote(why),
                 MachineJsonMembers(machine));
    return 0;
  }

  absl::StatusOr<BenchRunfiles> runfiles = BenchRunfiles::Create(argv0);
  if (!runfiles.ok()) return Fail(runfiles.status());
  absl::StatusOr<std::string> tributary = runfiles->Find("tributary/cli/tributary");
  if (!tributary.ok()) return Fail(tributary.status());
  absl::StatusOr<std::string> script = runfiles->Find("tributary/bench/vs_ddp/ddp_mlp.py");
  if (!script.ok()) return Fail(script.status());
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  if (!spec.ok()) return Fail(spec.status());
  const std::string job_json = *work_dir + "/job.json";
  if (absl::Status written = WriteJobJson(*spec, job_json); !written.ok()) return Fail(written);
  const double target = absl::GetFlag(FLAGS_target_accuracy);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int processes =
      absl::GetFlag(FLAGS_ddp_processes) > 0 ? absl::GetFlag(FLAGS_ddp_processes) : workers;
  const int threads = absl::GetFlag(FLAGS_ddp_threads) > 0
                          ? absl::GetFlag(FLAGS_ddp_threads)
                          : std::max(1, static_cast<int>(machine.cpu_cores) / processes);
  std::vector<std::string> ddp_argv = {
      python,
      *script,
      "--job_json=" + job_json,
      absl::StrCat("--processes=", processes),
      absl::StrCat("--threads=", threads),
      "--work_dir=" + *work_dir,
  };
  // A TorchScript job: both sides train the same file.
  std::vector<std::string> cluster_model_args;
  if (const std::string model_file = absl::GetFlag(FLAGS_model_file); !model_file.empty()) {
    ddp_argv.push_back("--model_file=" + model_file);
    cluster_model_args.push_back("--model_file=" + model_file);
  }

  std::printf("vs_ddp: %s\n", MachineLine(machine).c_str());
  std::printf("job: %s\n", JobSpecJson(*spec).c_str());
  std::printf("logs: %s\n", work_dir->c_str());
  std::fflush(stdout);
  // What the PyTorch side cannot mirror is refused before anything runs.
  const std::string spec_check_log = *work_dir + "/ddp_spec_check.log";
  std::vector<std::string> check_argv = ddp_argv;
  check_argv.push_back("--check_only");
  absl::StatusOr<int> checked =
      RunToEnd("ddp_mlp --check_only", check_argv, spec_check_log, nullptr);
  if (!checked.ok()) return Fail(checked.status());
  if (*checked != 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the PyTorch side refuses this job: ", LastLine(spec_check_log))));
  }

  TributaryLocalOptions cluster_options;
  ApplyClusterFlags(*tributary, job_json, *work_dir + "/tributary-local", cluster_options);
  cluster_options.workers = workers;
  cluster_options.extra_args.insert(cluster_options.extra_args.end(), cluster_model_args.begin(),
                                    cluster_model_args.end());
  cluster_options.name = absl::StrFormat("tributary %dWx%dR", workers, spec->replicas_per_worker());
  std::printf("running tributary local: %d workers x %u replicas, %d PS shards ...\n", workers,
              spec->replicas_per_worker(), cluster_options.ps_shards);
  std::fflush(stdout);
  absl::StatusOr<TrainingRun> cluster = RunTributaryLocal(cluster_options);
  if (!cluster.ok()) return Fail(cluster.status());
  v1::JobSpec local_sgd_spec;
  absl::StatusOr<std::optional<TrainingRun>> local_sgd_run =
      RunLocalSgdIfAsked(cluster_options, *spec, *work_dir, &local_sgd_spec);
  if (!local_sgd_run.ok()) return Fail(local_sgd_run.status());
  std::optional<TrainingRun>& local_sgd = *local_sgd_run;

  std::printf("running PyTorch DDP (gloo): %d processes x %d threads ...\n", processes, threads);
  std::fflush(stdout);
  const std::string ddp_log = *work_dir + "/ddp.log";
  double ddp_seconds = 0;
  absl::StatusOr<int> ddp_exit = RunToEnd("ddp_mlp", ddp_argv, ddp_log, &ddp_seconds);
  if (!ddp_exit.ok()) return Fail(ddp_exit.status());
  if (*ddp_exit != 0) {
    return Fail(absl::UnavailableError(absl::StrCat("ddp_mlp.py exited with ", *ddp_exit, "; see ",
                                                    ddp_log, ": ", LastLine(ddp_log))));
  }
  absl::StatusOr<DdpRun> ddp =
      ParseDdp(ddp_log, ddp_seconds, absl::StrFormat("DDP gloo %dP", processes));
  if (!ddp.ok()) return Fail(ddp.status());

  const MachineInfo after = DescribeMachine();
  std::vector<const TrainingRun*> runs = {&*cluster};
  if (local_sgd.has_value()) runs.push_back(&*local_sgd);
  runs.push_back(&ddp->run);  // Last: every ratio column divides by DDP.
  std::printf("\n%s", SideBySide(runs, target).c_str());
  std::printf("\naccuracy curve (test accuracy @ seconds since the first step):\n");
  for (const TrainingRun* run : runs) {
    std::printf("  %-18s %s\n", run->name.c_str(), AccuracyCurve(*run).c_str());
  }
  std::printf(
      "\nPyTorch %s, %d threads per process, BLAS: %s (%.1f GFLOP/s sgemm per process).\n"
      "setup s: the cluster's from launch to every worker training (processes, data, "
      "rendezvous); DDP's from the script's start (torch import, data, spawn, rendezvous).\n",
      ddp->torch_version.c_str(), threads, ddp->blas.c_str(), ddp->sgemm_gflops);
  std::printf("%s\n", LoadAverageAfterLine(after).c_str());
  absl::PrintF(
      "{\"bench\": \"vs_ddp\", \"skipped\": false, %s, "
      "\"job\": %s, \"workers\": %d, \"ps_shards\": %d, \"ddp_processes\": %d, "
      "\"ddp_threads\": %d, \"torch_version\": %s, \"blas\": %s, "
      "\"ddp_sgemm_gflops_per_process\": %.2f, \"target_accuracy\": %.4f, \"tributary\": %s, "
      "\"ddp\": %s, \"ratios\": {\"samples_per_second\": %s, \"training_seconds\": %s, "
      "\"seconds_to_target\": %s}, \"local_sgd\": %s}\n",
      MachineJsonMembers(machine, after), JobSpecJson(*spec), workers, cluster_options.ps_shards,
      processes, threads, JsonQuote(ddp->torch_version), JsonQuote(ddp->blas), ddp->sgemm_gflops,
      target, TrainingRunJson(*cluster, target), TrainingRunJson(ddp->run, target),
      RatioJson(cluster->SamplesPerSecond(), ddp->run.SamplesPerSecond()),
      RatioJson(cluster->training_seconds, ddp->run.training_seconds),
      target > 0 ? RatioJson(cluster->SecondsTo(target), ddp->run.SecondsTo(target))
                 : std::string("null"),
      local_sgd.has_value()
          ? absl::StrCat("{\"sync_every\": ", local_sgd_spec.sync_every(),
                         ", \"run\": ", TrainingRunJson(*local_sgd, target),
                         ", \"ratios\": {\"samples_per_second\": ",
                         RatioJson(local_sgd->SamplesPerSecond(), ddp->run.SamplesPerSecond()),
                         ", \"seconds_to_target\": ",
                         target > 0 ? RatioJson(local_sgd->SecondsTo(target),
                                                ddp->run.SecondsTo(target))
                                    : std::string("null"),
                         "}}")
          : std::string("null"));
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  return tributary::bench::BenchMain(argc, argv, tributary::bench::kUsage,
                                     tributary::bench::Run);
}
