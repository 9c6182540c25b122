#include "cli/job_flags.h"

#include <google/protobuf/util/json_util.h>

#include <functional>
#include <set>
#include <utility>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/sha256.h"
#include "common/tls.h"
#include "worker/engine/torchscript.h"

// --- The job as a whole ---
ABSL_FLAG(std::string, job_json, "",
          "Read the JobSpec from this JSON file, or take the JSON itself when the value starts "
          "with '{' (proto3 JSON, as for grpcurl's SubmitJob 'spec'); flags given on the "
          "command line override its fields. Default: empty.");
ABSL_FLAG(std::string, job_name, "job", "Job name shown on the dashboard. Default: job.");

// --- Model ---
ABSL_FLAG(std::string, model, "mlp", "Model: logreg, mlp or cnn. Default: mlp.");
ABSL_FLAG(std::string, layers, "",
          "Layer sizes, comma separated: logreg/mlp [inputs,hidden...,classes] (mlp default "
          "784,256,128,10), cnn [hidden...,classes] (default 128,10).");
ABSL_FLAG(std::string, conv_channels, "", "cnn: channels of its two conv layers. Default: 32,64.");
ABSL_FLAG(std::string, input_shape, "",
          "cnn: input as channels,height,width. Default: 1,28,28 (Fashion-MNIST).");
ABSL_FLAG(double, dropout, 0, "Dropout probability after each hidden layer. Default: 0.");
ABSL_FLAG(std::string, model_file, "",
          "Train this TorchScript file (torch.jit.script(model).save(path)) instead of a "
          "built-in model: it is checked here, uploaded to the coordinator and fetched by "
          "the workers (model torchscript; --layers, --conv_channels, --input_shape and "
          "--dropout do not apply). Default: empty (a built-in model).");

// --- Data ---
ABSL_FLAG(std::string, dataset, "idx",
          "Dataset format: idx (MNIST/Fashion-MNIST files), csv, npy (NumPy files), tokens "
          "(a token stream: --train_tokens, --seq_len) or synthetic. Default: idx.");
ABSL_FLAG(std::string, data_dir, tributary::kDefaultIdxDirectory,
          "idx: directory of the IDX files. Default: /usr/share/datasets/fashion-mnist.");
ABSL_FLAG(std::string, train_csv, "", "csv: training file.");
ABSL_FLAG(std::string, test_csv, "", "csv: test file (optional).");
ABSL_FLAG(std::string, train_npy, "",
          "npy: training features (.npy, [samples, ...]; float32/float64 as float32, integer "
          "and bool dtypes as int64 ids, never scaled).");
ABSL_FLAG(std::string, train_labels_npy, "",
          "npy: training targets (.npy): integers [samples] are class ids; integers "
          "[samples, ...] and floats [samples, ...] are targets for a model with its own loss.");
ABSL_FLAG(std::string, test_npy, "", "npy: test features (optional).");
ABSL_FLAG(std::string, test_labels_npy, "", "npy: test labels (with --test_npy).");
ABSL_FLAG(std::string, train_tokens, "",
          "tokens: the training token ids (.npy, one flat integer array), memory-mapped.");
ABSL_FLAG(std::string, test_tokens, "", "tokens: the test token ids (optional).");
ABSL_FLAG(uint32_t, seq_len, 0,
          "tokens: ids per sample window (x = window[0, T), y = window[1, T + 1)); required "
          "with --dataset=tokens, in [1, 65536].");
ABSL_FLAG(int, label_column, 0, "csv: 0-based label column. Default: 0.");
ABSL_FLAG(bool, csv_header, false, "csv: skip the first line. Default: false.");
ABSL_FLAG(uint64_t, train_limit, 0, "Use only the first N training samples; 0 = all.");
ABSL_FLAG(uint64_t, test_limit, 0, "Use only the first N test samples; 0 = all.");
ABSL_FLAG(uint64_t, synthetic_train, 0, "synthetic: training samples; 0 = the default (4096).");
ABSL_FLAG(uint64_t, synthetic_test, 0, "synthetic: test samples; 0 = the default (1024).");
ABSL_FLAG(uint32_t, synthetic_features, 0,
          "synthetic: features per sample; 0 = the default (784).");
ABSL_FLAG(uint32_t, synthetic_classes, 0, "synthetic: classes; 0 = the default (10).");
ABSL_FLAG(bool, normalize, false,
          "Standardise features with the training set's mean and std. Default: false.");

// --- Schedule ---
ABSL_FLAG(uint32_t, batch, 64, "Global batch size (samples per step, all replicas). Default: 64.");
ABSL_FLAG(uint32_t, epochs, 3, "Epochs; 0 = bounded by --max_steps only. Default: 3.");
ABSL_FLAG(uint64_t, max_steps, 0, "Stop after this many steps; 0 = no cap. Default: 0.");
ABSL_FLAG(uint64_t, eval_interval, 0,
          "Evaluate every N steps and after the last step; 0 = about ten times a run. "
          "Default: 0.");
ABSL_FLAG(uint64_t, eval_samples, 0,
          "Test samples each evaluation before the last step takes (the first of the test "
          "split); 0 = 1000. The final evaluation takes the whole test split. Default: 0.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initial parameters, data order and dropout. Default: 1.");

// --- Optimizer ---
ABSL_FLAG(std::string, optimizer, "momentum", "sgd, momentum, adam or adamw. Default: momentum.");
ABSL_FLAG(double, lr, 0.05,
          "Learning rate. Default: 0.05 for sgd and momentum; adam and adamw take 0.001 "
          "unless --lr is given.");
ABSL_FLAG(double, momentum, 0.9, "momentum: coefficient. Default: 0.9.");
ABSL_FLAG(bool, nesterov, false, "momentum: Nesterov's form. Default: false.");
ABSL_FLAG(double, beta1, 0, "adam/adamw: first-moment decay; 0 = the default (0.9).");
ABSL_FLAG(double, beta2, 0, "adam/adamw: second-moment decay; 0 = the default (0.999).");
ABSL_FLAG(double, epsilon, 0, "adam/adamw: denominator epsilon; 0 = the default (1e-8).");
ABSL_FLAG(double, weight_decay, 0, "Weight decay (L2; decoupled for adamw). Default: 0.");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "constant, step or cosine (to min_lr over the job's steps). Default: cosine.");
ABSL_FLAG(uint64_t, lr_step_size, 0, "step schedule: steps between decays.");
ABSL_FLAG(double, lr_gamma, 0.1, "step schedule: decay factor. Default: 0.1.");
ABSL_FLAG(double, min_lr, 0, "cosine schedule: floor. Default: 0.");
ABSL_FLAG(uint64_t, warmup_steps, 0, "Linear warm-up steps. Default: 0.");

// --- Distribution ---
ABSL_FLAG(std::string, mode, "sync",
          "sync, async, bounded (bounded staleness) or local_sgd (each node steps on its own "
          "and the PS averages every --sync_every steps). Default: sync.");
ABSL_FLAG(uint32_t, staleness, 4, "bounded: max steps ahead of the slowest node. Default: 4.");
ABSL_FLAG(uint32_t, sync_every, 0,
          "local_sgd: local steps between synchronizations, in [1, 1000000]; 0 = the job "
          "default (8). Default: 0.");
ABSL_FLAG(std::string, outer_optimizer, "sgd",
          "local_sgd: the PS's optimizer on the nodes' mean parameter change: sgd or momentum "
          "(DiLoCo: momentum with --outer_nesterov). Default: sgd.");
ABSL_FLAG(double, outer_lr, 1.0,
          "local_sgd: the outer optimizer's learning rate (1 with sgd = plain averaging). "
          "Default: 1.");
ABSL_FLAG(double, outer_momentum, 0.9, "local_sgd, outer momentum: coefficient. Default: 0.9.");
ABSL_FLAG(bool, outer_nesterov, false,
          "local_sgd, outer momentum: Nesterov's form. Default: false.");
ABSL_FLAG(uint32_t, nodes_min, 0,
          "Nodes needed to start (and to go on after a failure); 0 = every node the local "
          "cluster starts (submit: 1).");
ABSL_FLAG(uint32_t, nodes_max, 0, "Nodes admitted; 0 = nodes_min.");
ABSL_FLAG(uint32_t, replicas, 0,
          "Replicas per worker process. 0 = `tributary local`: one per core it gives each "
          "worker (the usable cores / --workers, at least 1); elsewhere 1. Default: 0.");
ABSL_FLAG(std::string, job_devices, "auto", "Where replicas run: auto, cpu or gpu. Default: auto.");
ABSL_FLAG(int64_t, partition_bytes, tributary::kDefaultPartitionBytes,
          "Largest partition in bytes. Default: 4194304 (4 MiB).");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "Gradient dtype on the wire: float32, float16 or bfloat16. Default: float32.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "PS checkpoint directory; empty = each shard's own. Default: empty.");
ABSL_FLAG(uint64_t, checkpoint_interval, 0,
          "Checkpoint every N steps; 0 = only on demand and at the end (tributary local: every "
          "500 steps unless given, so an interrupted run can continue). Default: 0.");
ABSL_FLAG(uint32_t, pending_timeout, 0,
          "Fail the job when no generation has formed this many seconds after submission "
          "(no workers that can take it, no GPUs, missing PS shards); 0 = wait as long as it "
          "takes. Default: 0.");
ABSL_FLAG(std::string, resume, "",
          "Start from the newest checkpoint of this earlier job (its id) that every PS shard "
          "holds, in this job's checkpoint directory: parameters, optimizer state and step "
          "(tributary local continues an interrupted run in its --run_dir by itself). "
          "Default: empty.");
ABSL_FLAG(std::string, init_from, "",
          "Start from trained parameters (fine-tuning): a float32 file as `tributary pull "
          "--out` or --params_out write it; every worker reads it (under its --data_root). "
          "Default: empty.");

namespace tributary::cli {
namespace {

std::set<std::string>& GivenFlags() {
  static auto* given = new std::set<std::string>;
  return *given;
}

absl::Status BadFlag(const std::string& name, const std::string& value,
                     const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": expected ", expected));
}

// The flag that sets each JobSpec field, for errors in the user's words.
constexpr std::pair<const char*, const char*> kFlagOfField[] = {
    {"name", "job_name"},
    {"model.name", "model"},
    {"model.layer_sizes", "layers"},
    {"model.conv_channels", "conv_channels"},
    {"model.input_shape", "input_shape"},
    {"model.dropout", "dropout"},
    {"model.torchscript", "model_file"},
    {"dataset.format", "dataset"},
    {"dataset.directory", "data_dir"},
    {"dataset.train_path", "train_npy"},
    {"dataset.train_path", "train_csv"},
    {"dataset.test_path", "test_npy"},
    {"dataset.test_path", "test_csv"},
    {"dataset.train_labels_path", "train_labels_npy"},
    {"dataset.test_labels_path", "test_labels_npy"},
    {"dataset.train_path", "train_tokens"},
    {"dataset.test_path", "test_tokens"},
    {"dataset.seq_len", "seq_len"},
    {"dataset.label_column", "label_column"},
    {"dataset.synthetic_train_samples", "synthetic_train"},
    {"dataset.synthetic_test_samples", "synthetic_test"},
    {"dataset.synthetic_features", "synthetic_features"},
    {"dataset.synthetic_classes", "synthetic_classes"},
    {"global_batch_size", "batch"},
    {"epochs", "epochs"},
    {"max_steps", "max_steps"},
    {"eval_interval_steps", "eval_interval"},
    {"eval_samples", "eval_samples"},
    {"seed", "seed"},
    {"optimizer.type", "optimizer"},
    {"optimizer.learning_rate", "lr"},
    {"optimizer.momentum", "momentum"},
    {"optimizer.weight_decay", "weight_decay"},
    {"optimizer.beta1", "beta1"},
    {"optimizer.beta2", "beta2"},
    {"optimizer.epsilon", "epsilon"},
    {"optimizer.schedule.kind", "lr_schedule"},
    {"optimizer.schedule.step_size", "lr_step_size"},
    {"optimizer.schedule.gamma", "lr_gamma"},
    {"optimizer.schedule.min_lr", "min_lr"},
    {"optimizer.schedule.warmup_steps", "warmup_steps"},
    {"mode", "mode"},
    {"staleness", "staleness"},
    {"sync_every", "sync_every"},
    {"outer_optimizer.type", "outer_optimizer"},
    {"outer_optimizer.learning_rate", "outer_lr"},
    {"outer_optimizer.momentum", "outer_momentum"},
    {"nodes_min", "nodes_min"},
    {"nodes_max", "nodes_max"},
    {"replicas_per_worker", "replicas"},
    {"devices", "job_devices"},
    {"partition_bytes", "partition_bytes"},
    {"wire_dtype", "wire_dtype"},
    {"checkpoint_dir", "checkpoint_dir"},
    {"checkpoint_interval_steps", "checkpoint_interval"},
    {"resume_from", "resume"},
    {"pending_timeout_seconds", "pending_timeout"},
    {"init_from", "init_from"},
};

// A JobSpec error ("optimizer.learning_rate: must be ..., got -1") in the words of the
// flag that set the field ("--lr: optimizer.learning_rate must be ..., got -1"), when a
// flag did (not the --job_json file).
absl::Status FlagError(const absl::Status& status,
                       const std::function<bool(const char*)>& flag_applies) {
  const absl::string_view message = status.message();
  size_t best = 0;
  const char* flag = nullptr;
  // The longest field the message starts with, set by a flag that applies; of the flags
  // that share a field (dataset.train_path: --train_npy, --train_csv), the one given.
  for (const auto& [field, name] : kFlagOfField) {
    const absl::string_view prefix(field);
    const bool longer = prefix.size() > best;
    const bool given_instead =
        prefix.size() == best && flag != nullptr && FlagGiven(name) && !FlagGiven(flag);
    if ((longer || given_instead) && absl::StartsWith(message, prefix) &&
        (message.size() == prefix.size() || message[prefix.size()] == ':' ||
         message[prefix.size()] == '[' || message[prefix.size()] == '.') &&
        flag_applies(name)) {
      best = prefix.size();
      flag = name;
    }
  }
  if (flag == nullptr) return status;
  const size_t colon = message.find(':');
  return absl::Status(status.code(),
                      absl::StrCat("--", flag, ": ", message.substr(0, colon),
                                   colon == absl::string_view::npos ? "" : message.substr(colon + 1)));
}

absl::StatusOr<std::vector<uint32_t>> ParseSizes(const std::string& name,
                                                 const std::string& value) {
  std::vector<uint32_t> sizes;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    uint32_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size == 0) {
      return BadFlag(name, value, "positive integers separated by commas");
    }
    sizes.push_back(size);
  }
  return sizes;
}

template <typename Enum>
absl::StatusOr<Enum> ParseChoice(const std::string& name, const std::string& value,
                                 const std::vector<std::pair<std::string, Enum>>& choices) {
  const std::string lower = absl::AsciiStrToLower(value);
  std::string expected;
  for (const auto& [text, result] : choices) {
    if (lower == text) return result;
    absl::StrAppend(&expected, expected.empty() ? "" : ", ", text);
  }
  return BadFlag(name, value, "one of " + expected);
}

}  // namespace

void RememberGivenFlags(int argc, char** argv) {
  GivenFlags().clear();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0 && arg.rfind("-", 0) == 0) arg = "-" + arg;
    if (arg.rfind("--", 0) != 0) continue;
    std::string name =
        arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    GivenFlags().insert(name);
    if (name.rfind("no", 0) == 0) GivenFlags().insert(name.substr(2));
  }
}

bool FlagGiven(const std::string& name) { return GivenFlags().count(name) > 0; }

absl::StatusOr<v1::JobSpec> JobSpecFromFlags(std::shared_ptr<const std::string>* model_file) {
  v1::JobSpec spec;
  const std::string json_path = absl::GetFlag(FLAGS_job_json);
  const bool from_json = !json_path.empty();
  if (from_json) {
    // A file, or the JSON itself when it starts with '{'.
    absl::StatusOr<std::string> json =
        json_path[0] == '{' ? absl::StatusOr<std::string>(json_path) : ReadFileToString(json_path);
    if (!json.ok()) return json.status();
    const auto parsed = google::protobuf::util::JsonStringToMessage(*json, &spec);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_json=", json_path.size() > 80 ? json_path.substr(0, 80) + "..." : json_path,
                       ": ", parsed.message().as_string()));
    }
  }
  // Without --job_json every flag applies (its default included); with it, only the
  // flags given on the command line.
  auto use = [&](const char* name) { return !from_json || FlagGiven(name); };

  if (use("job_name")) spec.set_name(absl::GetFlag(FLAGS_job_name));
  v1::ModelSpec& model = *spec.mutable_model();
  if (use("model")) model.set_name(absl::AsciiStrToLower(absl::GetFlag(FLAGS_model)));
  if (use("layers") && !absl::GetFlag(FLAGS_layers).empty()) {
    absl::StatusOr<std::vector<uint32_t>> sizes = ParseSizes("layers", absl::GetFlag(FLAGS_layers));
    if (!sizes.ok()) return sizes.status();
    model.clear_layer_sizes();
    for (uint32_t size : *sizes) model.add_layer_sizes(size);
  }
  if (use("conv_channels") && !absl::GetFlag(FLAGS_conv_channels).empty()) {
    absl::StatusOr<std::vector<uint32_t>> sizes =
        ParseSizes("conv_channels", absl::GetFlag(FLAGS_conv_channels));
    if (!sizes.ok()) return sizes.status();
    model.clear_conv_channels();
    for (uint32_t size : *sizes) model.add_conv_channels(size);
  }
  if (use("input_shape") && !absl::GetFlag(FLAGS_input_shape).empty()) {
    absl::StatusOr<std::vector<uint32_t>> shape =
        ParseSizes("input_shape", absl::GetFlag(FLAGS_input_shape));
    if (!shape.ok()) return shape.status();
    if (shape->size() != 3) {
      return BadFlag("input_shape", absl::GetFlag(FLAGS_input_shape),
                     "three sizes: channels,height,width");
    }
    model.clear_input_shape();
    for (uint32_t size : *shape) model.add_input_shape(size);
  }
  if (use("dropout")) model.set_dropout(static_cast<float>(absl::GetFlag(FLAGS_dropout)));
  const std::string model_path = absl::GetFlag(FLAGS_model_file);
  if (!model_path.empty()) {
    if (FlagGiven("model") && model.name() != kTorchScriptModel) {
      return BadFlag("model", absl::GetFlag(FLAGS_model),
                     "torchscript (or no --model) with --model_file");
    }
    for (const char* native : {"layers", "conv_channels", "input_shape", "dropout"}) {
      if (FlagGiven(native)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", native, ": does not apply with --model_file (the module defines its layers "
            "and the data its input shape)"));
      }
    }
    absl::StatusOr<std::shared_ptr<const std::string>> bytes =
        engine::ReadModelFile(model_path, engine::kDefaultMaxModelBytes);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model_file=", model_path, ": ", bytes.status().message()));
    }
    model.Clear();
    model.set_name(kTorchScriptModel);
    std::string base = model_path.substr(model_path.find_last_of('/') + 1);
    model.mutable_torchscript()->set_file_name(base);
    model.mutable_torchscript()->set_sha256(Sha256Hex(**bytes));
    if (model_file != nullptr) *model_file = *bytes;
  } else if (IsTorchScript(model) && model_file != nullptr) {
    return absl::InvalidArgumentError(
        "model torchscript needs --model_file=PATH (the file to upload)");
  }

  v1::DatasetSpec& dataset = *spec.mutable_dataset();
  if (use("dataset")) {
    absl::StatusOr<v1::DatasetFormat> format = ParseChoice<v1::DatasetFormat>(
        "dataset", absl::GetFlag(FLAGS_dataset),
        {{"idx", v1::IDX},
         {"csv", v1::CSV},
         {"npy", v1::NPY},
         {"tokens", v1::TOKENS},
         {"synthetic", v1::SYNTHETIC}});
    if (!format.ok()) return format.status();
    dataset.set_format(*format);
  }
  if (use("data_dir") && dataset.format() == v1::IDX) {
    dataset.set_directory(absl::GetFlag(FLAGS_data_dir));
  }
  // Each format's own flags, and no other's.
  const std::vector<std::pair<v1::DatasetFormat, std::vector<const char*>>> own_flags = {
      {v1::NPY, {"train_npy", "train_labels_npy", "test_npy", "test_labels_npy"}},
      {v1::TOKENS, {"train_tokens", "test_tokens", "seq_len"}},
      {v1::CSV, {"train_csv", "test_csv"}}};
  for (const auto& [format, flags] : own_flags) {
    if (format == dataset.format()) continue;
    for (const char* flag : flags) {
      if (FlagGiven(flag)) {
        const char* name = format == v1::NPY ? "npy" : format == v1::TOKENS ? "tokens" : "csv";
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": needs --dataset=", name, " (the job's is ",
                         absl::AsciiStrToLower(v1::DatasetFormat_Name(dataset.format())), ")"));
      }
    }
  }
  if (dataset.format() == v1::NPY) {
    if (use("train_npy")) dataset.set_train_path(absl::GetFlag(FLAGS_train_npy));
    if (use("train_labels_npy")) {
      dataset.set_train_labels_path(absl::GetFlag(FLAGS_train_labels_npy));
    }
    if (use("test_npy")) dataset.set_test_path(absl::GetFlag(FLAGS_test_npy));
    if (use("test_labels_npy")) dataset.set_test_labels_path(absl::GetFlag(FLAGS_test_labels_npy));
  } else if (dataset.format() == v1::TOKENS) {
    if (use("train_tokens")) dataset.set_train_path(absl::GetFlag(FLAGS_train_tokens));
    if (use("test_tokens")) dataset.set_test_path(absl::GetFlag(FLAGS_test_tokens));
    if (use("seq_len")) dataset.set_seq_len(absl::GetFlag(FLAGS_seq_len));
  } else {
    if (use("train_csv")) dataset.set_train_path(absl::GetFlag(FLAGS_train_csv));
    if (use("test_csv")) dataset.set_test_path(absl::GetFlag(FLAGS_test_csv));
  }
  if (use("label_column")) {
    if (absl::GetFlag(FLAGS_label_column) < 0) {
      return BadFlag("label_column", std::to_string(absl::GetFlag(FLAGS_label_column)),
                     "a column index >= 0");
    }
    dataset.set_label_column(static_cast<uint32_t>(absl::GetFlag(FLAGS_label_column)));
  }
  if (use("csv_header")) dataset.set_csv_has_header(absl::GetFlag(FLAGS_csv_header));
  if (use("train_limit")) dataset.set_train_limit(absl::GetFlag(FLAGS_train_limit));
  if (use("test_limit")) dataset.set_test_limit(absl::GetFlag(FLAGS_test_limit));
  if (use("synthetic_train") && absl::GetFlag(FLAGS_synthetic_train) > 0) {
    dataset.set_synthetic_train_samples(absl::GetFlag(FLAGS_synthetic_train));
  }
  if (use("synthetic_test") && absl::GetFlag(FLAGS_synthetic_test) > 0) {
    dataset.set_synthetic_test_samples(absl::GetFlag(FLAGS_synthetic_test));
  }
  if (use("synthetic_features") && absl::GetFlag(FLAGS_synthetic_features) > 0) {
    dataset.set_synthetic_features(absl::GetFlag(FLAGS_synthetic_features));
  }
  if (use("synthetic_classes") && absl::GetFlag(FLAGS_synthetic_classes) > 0) {
    dataset.set_synthetic_classes(absl::GetFlag(FLAGS_synthetic_classes));
  }
  if (use("normalize")) dataset.set_normalize(absl::GetFlag(FLAGS_normalize));

  // A zero would silently become the proto's default: refused instead.
  if (use("batch")) {
    if (absl::GetFlag(FLAGS_batch) == 0) {
      return BadFlag("batch", "0", absl::StrCat("a batch size in [1, ", kMaxGlobalBatch, "]"));
    }
    spec.set_global_batch_size(absl::GetFlag(FLAGS_batch));
  }
  if (use("epochs")) spec.set_epochs(absl::GetFlag(FLAGS_epochs));
  if (use("max_steps")) spec.set_max_steps(absl::GetFlag(FLAGS_max_steps));
  if (use("eval_interval")) spec.set_eval_interval_steps(absl::GetFlag(FLAGS_eval_interval));
  if (use("eval_samples")) spec.set_eval_samples(absl::GetFlag(FLAGS_eval_samples));
  if (use("seed")) spec.set_seed(absl::GetFlag(FLAGS_seed));

  v1::OptimizerSpec& optimizer = *spec.mutable_optimizer();
  if (use("optimizer")) {
    absl::StatusOr<v1::OptimizerType> type = ParseChoice<v1::OptimizerType>(
        "optimizer", absl::GetFlag(FLAGS_optimizer),
        {{"sgd", v1::SGD}, {"momentum", v1::MOMENTUM}, {"adam", v1::ADAM}, {"adamw", v1::ADAMW}});
    if (!type.ok()) return type.status();
    optimizer.set_type(*type);
  }
  // The flag's default suits SGD and momentum; Adam keeps its own unless asked.
  const bool adam = optimizer.type() == v1::ADAM || optimizer.type() == v1::ADAMW;
  if (use("lr") && (!adam || FlagGiven("lr"))) {
    optimizer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_lr)));
  }
  for (const auto& [name, value, field] :
       {std::tuple{"beta1", absl::GetFlag(FLAGS_beta1), &v1::OptimizerSpec::set_beta1},
        std::tuple{"beta2", absl::GetFlag(FLAGS_beta2), &v1::OptimizerSpec::set_beta2},
        std::tuple{"epsilon", absl::GetFlag(FLAGS_epsilon), &v1::OptimizerSpec::set_epsilon}}) {
    if (!use(name) || value == 0) continue;
    if (!adam) return BadFlag(name, std::to_string(value), "--optimizer=adam or adamw");
    (optimizer.*field)(static_cast<float>(value));
  }
  // Momentum's settings with another optimizer would be ignored: refused instead.
  const bool momentum = optimizer.type() == v1::MOMENTUM;
  if (FlagGiven("momentum") && !momentum) {
    return BadFlag("momentum", std::to_string(absl::GetFlag(FLAGS_momentum)),
                   "--optimizer=momentum");
  }
  if (use("nesterov") && absl::GetFlag(FLAGS_nesterov) && !momentum) {
    return BadFlag("nesterov", "true", "--optimizer=momentum");
  }
  if (use("momentum") && momentum) {
    optimizer.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_momentum)));
  }
  if (use("nesterov")) optimizer.set_nesterov(absl::GetFlag(FLAGS_nesterov));
  if (use("weight_decay")) {
    optimizer.set_weight_decay(static_cast<float>(absl::GetFlag(FLAGS_weight_decay)));
  }
  v1::LrSchedule& schedule = *optimizer.mutable_schedule();
  if (use("lr_schedule")) {
    absl::StatusOr<v1::LrScheduleKind> kind = ParseChoice<v1::LrScheduleKind>(
        "lr_schedule", absl::GetFlag(FLAGS_lr_schedule),
        {{"constant", v1::CONSTANT}, {"step", v1::STEP}, {"cosine", v1::COSINE}});
    if (!kind.ok()) return kind.status();
    schedule.set_kind(*kind);
  }
  if (use("lr_step_size")) schedule.set_step_size(absl::GetFlag(FLAGS_lr_step_size));
  if (use("lr_gamma") && schedule.kind() == v1::STEP) {
    schedule.set_gamma(static_cast<float>(absl::GetFlag(FLAGS_lr_gamma)));
  }
  if (use("min_lr")) schedule.set_min_lr(static_cast<float>(absl::GetFlag(FLAGS_min_lr)));
  if (use("warmup_steps")) schedule.set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));

  if (use("mode")) {
    absl::StatusOr<v1::TrainingMode> mode = ParseChoice<v1::TrainingMode>(
        "mode", absl::GetFlag(FLAGS_mode),
        {{"sync", v1::SYNC},
         {"async", v1::ASYNC},
         {"bounded", v1::BOUNDED_STALENESS},
         {"local_sgd", v1::LOCAL_SGD}});
    if (!mode.ok()) return mode.status();
    spec.set_mode(*mode);
  }
  // The local SGD flags mean nothing in another mode: refused there when given.
  if (spec.mode() != v1::LOCAL_SGD) {
    for (const char* name :
         {"sync_every", "outer_optimizer", "outer_lr", "outer_momentum", "outer_nesterov"}) {
      if (FlagGiven(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": applies only with --mode=local_sgd (the job's mode is ",
                         v1::TrainingMode_Name(spec.mode()), ")"));
      }
    }
  } else {
    if (use("sync_every") && absl::GetFlag(FLAGS_sync_every) > 0) {
      spec.set_sync_every(absl::GetFlag(FLAGS_sync_every));
    }
    v1::OptimizerSpec& outer = *spec.mutable_outer_optimizer();
    if (use("outer_optimizer")) {
      absl::StatusOr<v1::OptimizerType> type = ParseChoice<v1::OptimizerType>(
          "outer_optimizer", absl::GetFlag(FLAGS_outer_optimizer),
          {{"sgd", v1::SGD}, {"momentum", v1::MOMENTUM}});
      if (!type.ok()) return type.status();
      outer.set_type(*type);
    }
    if (use("outer_lr")) outer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_outer_lr)));
    const bool outer_momentum = outer.type() == v1::MOMENTUM;
    if (FlagGiven("outer_momentum") && !outer_momentum) {
      return BadFlag("outer_momentum", std::to_string(absl::GetFlag(FLAGS_outer_momentum)),
                     "--outer_optimizer=momentum");
    }
    if (use("outer_nesterov") && absl::GetFlag(FLAGS_outer_nesterov) && !outer_momentum) {
      return BadFlag("outer_nesterov", "true", "--outer_optimizer=momentum");
    }
    if (use("outer_momentum") && outer_momentum) {
      outer.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_outer_momentum)));
    }
    if (use("outer_nesterov")) outer.set_nesterov(absl::GetFlag(FLAGS_outer_nesterov));
  }
  if (use("staleness") && spec.mode() == v1::BOUNDED_STALENESS) {
    spec.set_staleness(absl::GetFlag(FLAGS_staleness));
  }
  if (use("nodes_min") && absl::GetFlag(FLAGS_nodes_min) > 0) {
    spec.set_nodes_min(absl::GetFlag(FLAGS_nodes_min));
  }
  if (use("nodes_max") && absl::GetFlag(FLAGS_nodes_max) > 0) {
    spec.set_nodes_max(absl::GetFlag(FLAGS_nodes_max));
  }
  if (FlagGiven("replicas") && absl::GetFlag(FLAGS_replicas) == 0) {
    return BadFlag("replicas", "0",
                   "a replica count in [1, 64] (leave --replicas out for the default)");
  }
  if (use("replicas") && absl::GetFlag(FLAGS_replicas) > 0) {
    spec.set_replicas_per_worker(absl::GetFlag(FLAGS_replicas));
  }
  if (use("job_devices")) {
    absl::StatusOr<v1::DeviceKind> devices =
        ParseChoice<v1::DeviceKind>("job_devices", absl::GetFlag(FLAGS_job_devices),
                                    {{"auto", v1::AUTO}, {"cpu", v1::CPU}, {"gpu", v1::GPU}});
    if (!devices.ok()) return devices.status();
    spec.set_devices(*devices);
  }
  if (use("partition_bytes")) spec.set_partition_bytes(absl::GetFlag(FLAGS_partition_bytes));
  if (use("wire_dtype")) {
    absl::StatusOr<v1::DType> dtype = ParseChoice<v1::DType>(
        "wire_dtype", absl::GetFlag(FLAGS_wire_dtype),
        {{"float32", v1::FLOAT32}, {"float16", v1::FLOAT16}, {"bfloat16", v1::BFLOAT16}});
    if (!dtype.ok()) return dtype.status();
    spec.set_wire_dtype(*dtype);
  }
  if (use("checkpoint_dir")) spec.set_checkpoint_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  if (use("checkpoint_interval")) {
    spec.set_checkpoint_interval_steps(absl::GetFlag(FLAGS_checkpoint_interval));
  }

  if (use("pending_timeout")) spec.set_pending_timeout_seconds(absl::GetFlag(FLAGS_pending_timeout));
  if (use("resume")) spec.set_resume_from(absl::GetFlag(FLAGS_resume));
  if (use("init_from")) spec.set_init_from(absl::GetFlag(FLAGS_init_from));
  if (use("epochs") && spec.epochs() == 0 && spec.max_steps() == 0) {
    return absl::InvalidArgumentError(
        "--epochs=0: bounded by --max_steps alone, so --max_steps must be given too");
  }

  spec = WithDefaults(std::move(spec));
  if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) {
    return FlagError(valid, [&](const char* flag) { return use(flag); });
  }
  return spec;
}

}  // namespace tributary::cli
