// train_local: the single-process reference trainer. Trains a model of the job spec
// on R in-process replicas (the batch split and gradient sum a worker performs) and
// prints progress and test evaluations; the last line is a JSON summary.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/job_flags.h"
#include "common/malloc_thresholds.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "proto/job.pb.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

// The job: every job flag of `tributary local` (common/job_flags.h, docs/cli.md), on top
// of --job_json; --replicas is the number of in-process replicas here.

// --- How it runs ---
ABSL_FLAG(std::string, device, "cpu",
          "cpu or gpu (gpu needs a --config=cuda build). Default: cpu.");
ABSL_FLAG(int, threads, 0, "CPU cores for matrix products in all; 0 = all. Default: 0.");
ABSL_FLAG(uint64_t, log_interval, 100, "Print training progress every N steps. Default: 100.");
ABSL_FLAG(std::string, save_params, "",
          "Write the final parameters here as raw little-endian float32. Default: none.");
ABSL_FLAG(std::string, export, "",
          "Write the trained model here as a TorchScript file (torch.jit.load reads it). "
          "Default: none.");

namespace {

using tributary::v1::JobSpec;
using tributary::engine::LocalTrainer;
using tributary::engine::LossStats;
using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_local: %s\n", status.ToString().c_str());
  return 1;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The job and the model, as the first lines of the log.
void PrintJob(LocalTrainer& trainer, uint32_t replicas, const std::string& device,
              double load_seconds) {
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions json_options;
  (void)google::protobuf::util::MessageToJsonString(trainer.spec(), &spec_json, json_options);
  std::printf("job %s\n", spec_json.c_str());
  std::printf(
      "model %s: %lld parameters in %zu tensors; train %lld samples, test %lld; "
      "%llu steps (%llu per epoch), %u replica(s) on %s; data loaded in %.1fs\n",
      trainer.model().name.c_str(), static_cast<long long>(trainer.model().num_parameters),
      trainer.model().tensors.size(), static_cast<long long>(trainer.data().train.size()),
      static_cast<long long>(trainer.data().test.size()),
      static_cast<unsigned long long>(trainer.total_steps()),
      static_cast<unsigned long long>(trainer.sampler().steps_per_epoch()), replicas,
      device.c_str(), load_seconds);
  std::fflush(stdout);
}

// What a run measured.
struct Run {
  double train_seconds = 0;  // Excludes evaluations.
  uint64_t trained_samples = 0;
  double last_loss = 0;
  LossStats last_eval;
  bool evaluated = false;
};

// Trains to the end, printing a line every `log_interval` steps and each evaluation
// (as the cluster's rank 0 evaluates: before the last step on the test split's first
// samples, after it on all of them).
absl::StatusOr<Run> Train(LocalTrainer& trainer, uint64_t log_interval) {
  const JobSpec& spec = trainer.spec();
  const auto start = Clock::now();
  Run run;
  LossStats window;
  auto window_start = Clock::now();
  // Epochs counted from 1, as `tributary` counts them ("epoch 2/3").
  auto epoch_of = [&](uint64_t epoch) {
    return spec.epochs() > 0
               ? absl::StrCat(std::min<uint64_t>(epoch + 1, spec.epochs()), "/", spec.epochs())
               : absl::StrCat(epoch + 1);
  };
  while (!trainer.done()) {
    const auto step_start = Clock::now();
    absl::StatusOr<tributary::engine::StepResult> result = trainer.Step();
    if (!result.ok()) return result.status();
    run.train_seconds += SecondsSince(step_start);
    run.trained_samples += result->stats.samples;
    window += result->stats;
    run.last_loss = result->stats.mean_loss();
    const uint64_t done = result->step + 1;
    if (done % log_interval == 0 || trainer.done()) {
      const double window_seconds = SecondsSince(window_start);
      std::printf(
          "train  epoch %s step %llu/%llu: loss %.4f accuracy %.4f lr %.6g "
          "samples/s %.0f\n",
          epoch_of(result->epoch).c_str(), static_cast<unsigned long long>(done),
          static_cast<unsigned long long>(trainer.total_steps()), window.mean_loss(),
          window.accuracy(), result->learning_rate,
          window_seconds > 0 ? window.samples / window_seconds : 0.0);
      std::fflush(stdout);
      window = {};
      window_start = Clock::now();
    }
    if (!tributary::EvaluatesAfter(spec, done, trainer.total_steps()) ||
        trainer.data().test.size() == 0) {
      continue;
    }
    const auto eval_start = Clock::now();
    absl::StatusOr<LossStats> eval =
        trainer.Evaluate(tributary::EvalSamplesAfter(spec, done, trainer.total_steps()));
    if (!eval.ok()) return eval.status();
    run.last_eval = *eval;
    run.evaluated = true;
    std::printf(
        "eval   epoch %s step %llu: test loss %.4f accuracy %.4f (%lld samples, %.1fs)"
        " elapsed %.1fs\n",
        epoch_of(result->epoch).c_str(), static_cast<unsigned long long>(done),
        eval->mean_loss(), eval->accuracy(), static_cast<long long>(eval->samples),
        SecondsSince(eval_start), SecondsSince(start));
    std::fflush(stdout);
    window_start += Clock::now() - eval_start;  // Not training time.
  }
  return run;
}

// --save_params and --export.
absl::Status SaveOutputs(LocalTrainer& trainer) {
  const std::string save = absl::GetFlag(FLAGS_save_params);
  if (!save.empty()) {
    std::ofstream out(save, std::ios::binary | std::ios::trunc);
    const std::vector<float>& params = trainer.parameters();
    out.write(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
    if (!out) return absl::InternalError(absl::StrCat("--save_params: cannot write ", save));
  }
  const std::string export_path = absl::GetFlag(FLAGS_export);
  if (!export_path.empty()) {
    if (absl::Status s = tributary::engine::ExportTorchScript(
            trainer.model(), trainer.parameters().data(), export_path);
        !s.ok()) {
      return s;
    }
    std::printf("exported %s to %s\n", trainer.model().name.c_str(), export_path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  tributary::RememberGivenFlags(argc, argv);
  tributary::InitProcess(argc, argv,
                         "train_local: trains a model in one process (the SYNC reference).\n"
                         "Usage: train_local [--job_json=FILE|JSON] [--model=mlp] [--batch=64] "
                         "[--epochs=3] [--optimizer=adam] [--replicas=R] ...");
  tributary::ReuseLargeBlocks();  // Large blocks every step: reused, not faulted in again.
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<JobSpec> submitted = tributary::JobSpecFromFlags(&model_file);
  if (!submitted.ok()) return Fail(submitted.status());

  tributary::engine::TrainerOptions options;
  options.torchscript_bytes = model_file;
  options.replicas = submitted->replicas_per_worker();
  options.cpu_threads = absl::GetFlag(FLAGS_threads);
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "gpu") {
    options.device = tributary::engine::DeviceSpec::Kind::kGpu;
  } else if (device != "cpu") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--device: must be cpu or gpu, got '", device, "'")));
  }

  const auto load_start = Clock::now();
  absl::StatusOr<std::unique_ptr<LocalTrainer>> created =
      LocalTrainer::Create(*submitted, options);
  if (!created.ok()) return Fail(created.status());
  LocalTrainer& trainer = **created;
  PrintJob(trainer, options.replicas, device, SecondsSince(load_start));

  const auto start = Clock::now();
  absl::StatusOr<Run> run = Train(trainer, std::max<uint64_t>(1, absl::GetFlag(FLAGS_log_interval)));
  if (!run.ok()) return Fail(run.status());
  if (absl::Status saved = SaveOutputs(trainer); !saved.ok()) return Fail(saved);
  const JobSpec& spec = trainer.spec();
  std::printf(
      "{\"model\":\"%s\",\"steps\":%llu,\"epochs\":%u,\"batch\":%u,\"replicas\":%u,"
      "\"final_loss\":%.6f,\"test_loss\":%.6f,\"test_accuracy\":%.4f,"
      "\"train_samples_per_second\":%.1f,\"wall_seconds\":%.3f}\n",
      trainer.model().name.c_str(), static_cast<unsigned long long>(trainer.step()), spec.epochs(),
      spec.global_batch_size(), options.replicas, run->last_loss,
      run->evaluated ? run->last_eval.mean_loss() : -1.0,
      run->evaluated ? run->last_eval.accuracy() : -1.0,
      run->train_seconds > 0 ? run->trained_samples / run->train_seconds : 0.0,
      SecondsSince(start));
  return 0;
}
