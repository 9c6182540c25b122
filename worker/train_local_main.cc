// train_local: the single-process reference trainer. Trains a model of the job spec
// on R in-process replicas (the batch split and gradient sum a worker performs) and
// prints progress and test evaluations; the last line is a JSON summary.
#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/sha256.h"
#include "proto/job.pb.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

// --- The job (flags override the fields of --job_json that they name) ---
ABSL_FLAG(std::string, job_json, "",
          "JobSpec as proto3 JSON: a file path, or the JSON itself when it starts with '{'. "
          "Default: none (flags and WithDefaults only).");
ABSL_FLAG(std::string, model, "mlp", "Model name: logreg, mlp or cnn. Default: mlp.");
ABSL_FLAG(std::string, layer_sizes, "",
          "Comma-separated layer sizes (mlp: inputs,hidden...,classes; cnn: hidden...,classes). "
          "Default: the model's (mlp 784,256,128,10).");
ABSL_FLAG(std::string, conv_channels, "", "cnn: channels of its two convolutions, e.g. 32,64.");
ABSL_FLAG(double, dropout, 0, "Dropout probability after hidden layers, in [0, 1). Default: 0.");
ABSL_FLAG(std::string, model_file, "",
          "Train this TorchScript file (model torchscript) instead of a built-in model. "
          "Default: empty.");
ABSL_FLAG(std::string, dataset, "idx",
          "Dataset format: idx, csv, npy or synthetic. Default: idx.");
ABSL_FLAG(std::string, data_dir, "", "IDX directory. Default: /usr/share/datasets/fashion-mnist.");
ABSL_FLAG(std::string, train_csv, "", "CSV training file.");
ABSL_FLAG(std::string, test_csv, "", "CSV test file (optional).");
ABSL_FLAG(std::string, train_npy, "", "npy: training features file.");
ABSL_FLAG(std::string, train_labels_npy, "", "npy: training labels file.");
ABSL_FLAG(std::string, test_npy, "", "npy: test features file (optional).");
ABSL_FLAG(std::string, test_labels_npy, "", "npy: test labels file (with --test_npy).");
ABSL_FLAG(uint64_t, train_limit, 0, "Use the first N training samples; 0 = all. Default: 0.");
ABSL_FLAG(uint64_t, test_limit, 0, "Use the first N test samples; 0 = all. Default: 0.");
ABSL_FLAG(bool, normalize, false, "Standardise features with the training set's statistics.");
ABSL_FLAG(uint32_t, batch, 64, "Global batch size in samples. Default: 64.");
ABSL_FLAG(uint32_t, epochs, 1, "Epochs (0 = bounded by --max_steps). Default: 1.");
ABSL_FLAG(uint64_t, max_steps, 0, "Stop after this many steps; 0 = no cap. Default: 0.");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd, momentum, nesterov, adam or adamw. Default: sgd.");
ABSL_FLAG(double, lr, 0, "Learning rate; 0 = the optimizer's default (0.1 SGD, 0.001 Adam).");
ABSL_FLAG(double, momentum, 0, "momentum/nesterov: momentum; 0 = default 0.9.");
ABSL_FLAG(double, weight_decay, 0, "Weight decay. Default: 0.");
ABSL_FLAG(std::string, lr_schedule, "constant", "constant, step or cosine. Default: constant.");
ABSL_FLAG(uint64_t, lr_step_size, 0, "step schedule: steps between decays.");
ABSL_FLAG(uint64_t, warmup_steps, 0, "Linear warm-up steps. Default: 0.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of parameters, data order and dropout. Default: 1.");
ABSL_FLAG(uint64_t, eval_interval, 0,
          "Evaluate on the test split every N steps; 0 = at the end of each epoch. Default: 0.");

// --- How it runs ---
ABSL_FLAG(uint32_t, replicas, 1, "In-process replicas the batch is split over. Default: 1.");
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

// The flags named on the command line: these override what --job_json says.
std::vector<std::string>& GivenFlags() {
  static std::vector<std::string>* given = new std::vector<std::string>;
  return *given;
}

void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const std::string name(arg.substr(0, arg.find('=')));
    GivenFlags().push_back(name);
    if (absl::StartsWith(name, "no")) GivenFlags().push_back(name.substr(2));
  }
}

bool Specified(const char* name) {
  for (const std::string& given : GivenFlags()) {
    if (given == name) return true;
  }
  return false;
}

absl::Status ParseSizes(const std::string& text, const char* flag,
                        google::protobuf::RepeatedField<uint32_t>* out) {
  out->Clear();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t value;
    if (!absl::SimpleAtoi(part, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a number (in '", text, "')"));
    }
    out->Add(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> SpecFromFlags() {
  JobSpec spec;
  std::string json = absl::GetFlag(FLAGS_job_json);
  if (!json.empty()) {
    if (json[0] != '{') {
      std::ifstream in(json);
      if (!in) return absl::NotFoundError(absl::StrCat("--job_json: cannot read file ", json));
      std::stringstream content;
      content << in.rdbuf();
      json = content.str();
    }
    const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_json: not a JobSpec: ", status.ToString()));
    }
  }
  const bool from_json = !absl::GetFlag(FLAGS_job_json).empty();
  // A flag applies when given, or when there is no JSON to take the field from.
  auto use = [&](const char* name) { return Specified(name) || !from_json; };

  tributary::v1::ModelSpec& model = *spec.mutable_model();
  if (use("model")) model.set_name(absl::GetFlag(FLAGS_model));
  if (Specified("layer_sizes")) {
    if (auto s = ParseSizes(absl::GetFlag(FLAGS_layer_sizes), "layer_sizes",
                            model.mutable_layer_sizes());
        !s.ok()) {
      return s;
    }
  }
  if (Specified("conv_channels")) {
    if (auto s = ParseSizes(absl::GetFlag(FLAGS_conv_channels), "conv_channels",
                            model.mutable_conv_channels());
        !s.ok()) {
      return s;
    }
  }
  if (use("dropout")) model.set_dropout(static_cast<float>(absl::GetFlag(FLAGS_dropout)));
  if (Specified("model_file")) {
    // The digest is filled in by main() once the file is read.
    model.set_name(tributary::kTorchScriptModel);
    const std::string path = absl::GetFlag(FLAGS_model_file);
    model.mutable_torchscript()->set_file_name(path.substr(path.find_last_of('/') + 1));
  }

  tributary::v1::DatasetSpec& dataset = *spec.mutable_dataset();
  if (use("dataset")) {
    const std::string format = absl::AsciiStrToLower(absl::GetFlag(FLAGS_dataset));
    if (format == "idx") {
      dataset.set_format(tributary::v1::IDX);
    } else if (format == "csv") {
      dataset.set_format(tributary::v1::CSV);
    } else if (format == "synthetic") {
      dataset.set_format(tributary::v1::SYNTHETIC);
    } else if (format == "npy") {
      dataset.set_format(tributary::v1::NPY);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset: must be idx, csv, npy or synthetic, got '", format, "'"));
    }
  }
  if (Specified("train_npy")) dataset.set_train_path(absl::GetFlag(FLAGS_train_npy));
  if (Specified("train_labels_npy")) {
    dataset.set_train_labels_path(absl::GetFlag(FLAGS_train_labels_npy));
  }
  if (Specified("test_npy")) dataset.set_test_path(absl::GetFlag(FLAGS_test_npy));
  if (Specified("test_labels_npy")) {
    dataset.set_test_labels_path(absl::GetFlag(FLAGS_test_labels_npy));
  }
  if (Specified("data_dir")) dataset.set_directory(absl::GetFlag(FLAGS_data_dir));
  if (Specified("train_csv")) dataset.set_train_path(absl::GetFlag(FLAGS_train_csv));
  if (Specified("test_csv")) dataset.set_test_path(absl::GetFlag(FLAGS_test_csv));
  if (use("train_limit")) dataset.set_train_limit(absl::GetFlag(FLAGS_train_limit));
  if (use("test_limit")) dataset.set_test_limit(absl::GetFlag(FLAGS_test_limit));
  if (use("normalize")) dataset.set_normalize(absl::GetFlag(FLAGS_normalize));

  if (use("batch")) spec.set_global_batch_size(absl::GetFlag(FLAGS_batch));
  if (use("epochs")) spec.set_epochs(absl::GetFlag(FLAGS_epochs));
  if (use("max_steps")) spec.set_max_steps(absl::GetFlag(FLAGS_max_steps));
  if (use("seed")) spec.set_seed(absl::GetFlag(FLAGS_seed));
  if (use("eval_interval")) spec.set_eval_interval_steps(absl::GetFlag(FLAGS_eval_interval));
  if (Specified("replicas")) spec.set_replicas_per_worker(absl::GetFlag(FLAGS_replicas));

  tributary::v1::OptimizerSpec& optimizer = *spec.mutable_optimizer();
  if (use("optimizer")) {
    const std::string name = absl::AsciiStrToLower(absl::GetFlag(FLAGS_optimizer));
    optimizer.set_nesterov(false);
    if (name == "sgd") {
      optimizer.set_type(tributary::v1::SGD);
    } else if (name == "momentum") {
      optimizer.set_type(tributary::v1::MOMENTUM);
    } else if (name == "nesterov") {
      optimizer.set_type(tributary::v1::MOMENTUM);
      optimizer.set_nesterov(true);
    } else if (name == "adam") {
      optimizer.set_type(tributary::v1::ADAM);
    } else if (name == "adamw") {
      optimizer.set_type(tributary::v1::ADAMW);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--optimizer: must be sgd, momentum, nesterov, adam or adamw, got '", name, "'"));
    }
  }
  if (use("lr")) optimizer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_lr)));
  if (use("momentum")) optimizer.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_momentum)));
  if (use("weight_decay")) {
    optimizer.set_weight_decay(static_cast<float>(absl::GetFlag(FLAGS_weight_decay)));
  }
  tributary::v1::LrSchedule& schedule = *optimizer.mutable_schedule();
  if (use("lr_schedule")) {
    const std::string kind = absl::AsciiStrToLower(absl::GetFlag(FLAGS_lr_schedule));
    if (kind == "constant") {
      schedule.set_kind(tributary::v1::CONSTANT);
    } else if (kind == "step") {
      schedule.set_kind(tributary::v1::STEP);
    } else if (kind == "cosine") {
      schedule.set_kind(tributary::v1::COSINE);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--lr_schedule: must be constant, step or cosine, got '", kind, "'"));
    }
  }
  if (use("lr_step_size")) schedule.set_step_size(absl::GetFlag(FLAGS_lr_step_size));
  if (use("warmup_steps")) schedule.set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));
  return spec;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_local: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  RecordGivenFlags(argc, argv);
  tributary::InitProcess(argc, argv,
                         "train_local: trains a model in one process (the SYNC reference).\n"
                         "Usage: train_local [--job_json=FILE|JSON] [--model=mlp] [--batch=64] "
                         "[--epochs=1] [--optimizer=adam] [--replicas=R] ...");
  absl::StatusOr<JobSpec> submitted = SpecFromFlags();
  if (!submitted.ok()) return Fail(submitted.status());

  tributary::engine::TrainerOptions options;
  if (tributary::IsTorchScript(submitted->model())) {
    const std::string path = absl::GetFlag(FLAGS_model_file);
    if (path.empty()) {
      return Fail(absl::InvalidArgumentError("model torchscript needs --model_file=PATH"));
    }
    absl::StatusOr<std::shared_ptr<const std::string>> bytes =
        tributary::engine::ReadModelFile(path, tributary::engine::kDefaultMaxModelBytes);
    if (!bytes.ok()) return Fail(bytes.status());
    submitted->mutable_model()->mutable_torchscript()->set_sha256(tributary::Sha256Hex(**bytes));
    options.torchscript_bytes = *bytes;
  }
  options.replicas = absl::GetFlag(FLAGS_replicas);
  if (!Specified("replicas") && submitted->replicas_per_worker() > 0) {
    options.replicas = submitted->replicas_per_worker();
  }
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
  const uint64_t per_epoch = trainer.sampler().steps_per_epoch();
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

  auto evaluate = [&](uint64_t step, uint64_t epoch) -> absl::Status {
    const auto t = std::chrono::steady_clock::now();
    absl::StatusOr<tributary::engine::LossStats> eval = trainer.Evaluate();
    if (!eval.ok()) return eval.status();
    last_eval = *eval;
    evaluated = true;
    std::printf(
        "eval   epoch %llu step %llu: test loss %.4f accuracy %.4f (%lld samples, %.1fs)"
        " elapsed %.1fs\n",
        static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(step),
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
          "train  epoch %llu step %llu/%llu: loss %.4f accuracy %.4f lr %.6g "
          "samples/s %.0f\n",
          static_cast<unsigned long long>(result->epoch), static_cast<unsigned long long>(done),
          static_cast<unsigned long long>(trainer.total_steps()), window.mean_loss(),
          window.accuracy(), result->learning_rate,
          window_seconds > 0 ? window.samples / window_seconds : 0.0);
      std::fflush(stdout);
      window = {};
      window_start = std::chrono::steady_clock::now();
    }
    const bool epoch_end = done % per_epoch == 0;
    const uint64_t interval = spec.eval_interval_steps();
    const bool due = interval > 0 ? done % interval == 0 : epoch_end;
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
