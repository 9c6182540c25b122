#include "common/job_flags.h"

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
#include "common/job_flags_internal.h"
#include "common/tls.h"

// --- The job as a whole ---
ABSL_FLAG(std::string, job_json, "",
          "Read the JobSpec from this JSON file, or take the JSON itself when the value starts "
          "with '{' (proto3 JSON, as for grpcurl's SubmitJob 'spec'); flags given on the "
          "command line override its fields. Default: empty.");
ABSL_FLAG(std::string, job_name, "job", "Job name shown on the dashboard. Default: job.");

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

namespace tributary {
namespace {

std::set<std::string>& GivenFlags() {
  static auto* given = new std::set<std::string>;
  return *given;
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
    {"partition_cut", "partition_cut"},
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

}  // namespace

namespace job_flags {

absl::Status BadFlag(const std::string& name, const std::string& value,
                     const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": expected ", expected));
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

}  // namespace job_flags

using job_flags::BadFlag;

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
  const job_flags::FlagUse use{from_json};

  if (use("job_name")) spec.set_name(absl::GetFlag(FLAGS_job_name));
  for (absl::Status applied :
       {job_flags::ApplyModelFlags(use, spec, model_file), job_flags::ApplyDataFlags(use, spec)}) {
    if (!applied.ok()) return applied;
  }
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
  for (absl::Status applied :
       {job_flags::ApplyOptimizerFlags(use, spec), job_flags::ApplyModeFlags(use, spec)}) {
    if (!applied.ok()) return applied;
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

}  // namespace tributary
