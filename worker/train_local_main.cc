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
#include "cli/job_flags.h"
#include "common/malloc_thresholds.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "proto/job.pb.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

// The job: every job flag of `tributary local` (cli/job_flags.h, docs/cli.md), on top
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

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_local: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tributary::cli::RememberGivenFlags(argc, argv);
  tributary::InitProcess(argc, argv,
                         "train_local: trains a model in one process (the SYNC reference).\n"
                         "Usage: train_local [--job_json=FILE|JSON] [--model=mlp] [--batch=64] "
                         "[--epochs=3] [--optimizer=adam] [--replicas=R] ...");
  tributary::ReuseLargeBlocks();  // Large blocks every step: reused, not faulted in again.
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<JobSpec> submitted = tributary::cli::JobSpecFromFlags(&model_file);
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

  const auto load_start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<tributary::engine::LocalTrainer>> created =
      tributary::engine::LocalTrainer::Create(*submitted, options);
  if (!created.ok()) return Fail(created.status());
  tributary::engine::LocalTrainer& trainer = **created;
  const JobSpec& spec = trainer.spec();
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions json_options;
  (void)google::protobuf::util::MessageToJsonString(spec, &spec_json, json_options);
  std::printf("job %s\n", spec_json.c_str());
  std::printf(
      "model %s: %lld parameters in %zu tensors; train %lld samples, test %lld; "
      "%llu steps (%llu per epoch), %u replica(s) on %s; data loaded in %.1fs\n",
      trainer.model().name.c_str(), static_cast<long long>(trainer.model().num_parameters),
      trainer.model().tensors.size(), static_cast<long long>(trainer.data().train.size()),
      static_cast<long long>(trainer.data().test.size()),
      static_cast<unsigned long long>(trainer.total_steps()),
      static_cast<unsigned long long>(trainer.sampler().steps_per_epoch()), options.replicas,
      device.c_str(), load_seconds);
  std::fflush(stdout);

  const uint64_t log_interval = std::max<uint64_t>(1, absl::GetFlag(FLAGS_log_interval));
  const auto start = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  double train_seconds = 0;  // Excludes evaluations.
  uint64_t trained_samples = 0;
  tributary::engine::LossStats window;
  auto window_start = std::chrono::steady_clock::now();
  double last_loss = 0;
  tributary::engine::LossStats last_eval;
  bool evaluated = false;

  // Epochs counted from 1, as `tributary` counts them ("epoch 2/3").
  auto epoch_of = [&](uint64_t epoch) {
    return spec.epochs() > 0
               ? absl::StrCat(std::min<uint64_t>(epoch + 1, spec.epochs()), "/", spec.epochs())
               : absl::StrCat(epoch + 1);
  };
  // As the cluster's rank 0 evaluates: before the last step on the test split's first
  // samples, after it on all of them.
  auto evaluate = [&](uint64_t step, uint64_t epoch) -> absl::Status {
    const auto t = std::chrono::steady_clock::now();
    absl::StatusOr<tributary::engine::LossStats> eval =
        trainer.Evaluate(trainer.done() ? 0 : tributary::PeriodicEvalSamples(spec));
    if (!eval.ok()) return eval.status();
    last_eval = *eval;
    evaluated = true;
    std::printf(
        "eval   epoch %s step %llu: test loss %.4f accuracy %.4f (%lld samples, %.1fs)"
        " elapsed %.1fs\n",
        epoch_of(epoch).c_str(), static_cast<unsigned long long>(step),
        eval->mean_loss(), eval->accuracy(), static_cast<long long>(eval->samples),
        seconds_since(t), seconds_since(start));
    std::fflush(stdout);
    return absl::OkStatus();
  };

  while (!trainer.done()) {
    const auto step_start = std::chrono::steady_clock::now();
    absl::StatusOr<tributary::engine::StepResult> result = trainer.Step();
    if (!result.ok()) return Fail(result.status());
    train_seconds += seconds_since(step_start);
    trained_samples += result->stats.samples;
    window += result->stats;
    last_loss = result->stats.mean_loss();
    const uint64_t done = result->step + 1;
    if (done % log_interval == 0 || trainer.done()) {
      const double window_seconds = seconds_since(window_start);
      std::printf(
          "train  epoch %s step %llu/%llu: loss %.4f accuracy %.4f lr %.6g "
          "samples/s %.0f\n",
          epoch_of(result->epoch).c_str(), static_cast<unsigned long long>(done),
          static_cast<unsigned long long>(trainer.total_steps()), window.mean_loss(),
          window.accuracy(), result->learning_rate,
          window_seconds > 0 ? window.samples / window_seconds : 0.0);
      std::fflush(stdout);
      window = {};
      window_start = std::chrono::steady_clock::now();
    }
    const bool due = done % tributary::EvalIntervalSteps(spec, trainer.total_steps()) == 0;
    if ((due || trainer.done()) && trainer.data().test.size() > 0) {
      const auto eval_start = std::chrono::steady_clock::now();
      if (absl::Status s = evaluate(done, result->epoch); !s.ok()) return Fail(s);
      window_start += std::chrono::steady_clock::now() - eval_start;  // Not training time.
    }
  }

  const std::string save = absl::GetFlag(FLAGS_save_params);
  if (!save.empty()) {
    std::ofstream out(save, std::ios::binary | std::ios::trunc);
    const std::vector<float>& params = trainer.parameters();
    out.write(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
    if (!out) return Fail(absl::InternalError(absl::StrCat("--save_params: cannot write ", save)));
  }
  const std::string export_path = absl::GetFlag(FLAGS_export);
  if (!export_path.empty()) {
    if (absl::Status s = tributary::engine::ExportTorchScript(
            trainer.model(), trainer.parameters().data(), export_path);
        !s.ok()) {
      return Fail(s);
    }
    std::printf("exported %s to %s\n", trainer.model().name.c_str(), export_path.c_str());
  }
  const double wall = seconds_since(start);
  std::printf(
      "{\"model\":\"%s\",\"steps\":%llu,\"epochs\":%u,\"batch\":%u,\"replicas\":%u,"
      "\"final_loss\":%.6f,\"test_loss\":%.6f,\"test_accuracy\":%.4f,"
      "\"train_samples_per_second\":%.1f,\"wall_seconds\":%.1f}\n",
      trainer.model().name.c_str(), static_cast<unsigned long long>(trainer.step()), spec.epochs(),
      spec.global_batch_size(), options.replicas, last_loss,
      evaluated ? last_eval.mean_loss() : -1.0, evaluated ? last_eval.accuracy() : -1.0,
      train_seconds > 0 ? trained_samples / train_seconds : 0.0, wall);
  return 0;
}
