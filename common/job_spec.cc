#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/optimizer.h"
#include "common/sha256.h"

namespace tributary {
namespace {

template <typename T>
absl::Status Bad(const std::string& field, const T& value, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule, ", got ", value));
}

std::string Sizes(const google::protobuf::RepeatedField<uint32_t>& sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ","), "]");
}

bool AllPositive(const google::protobuf::RepeatedField<uint32_t>& sizes) {
  for (uint32_t size : sizes) {
    if (size == 0) return false;
  }
  return true;
}

void ModelDefaults(v1::ModelSpec& model) {
  if (model.name().empty()) model.set_name("mlp");
  if (model.name() == kTorchScriptModel && model.torchscript().file_name().empty() &&
      model.torchscript().sha256().size() >= 12) {
    model.mutable_torchscript()->set_file_name(model.torchscript().sha256().substr(0, 12) + ".pt");
  }
  if (model.name() == "mlp" && model.layer_sizes().empty()) {
    for (uint32_t size : {784, 256, 128, 10}) model.add_layer_sizes(size);
  }
  if (model.name() == "logreg" && model.layer_sizes().empty()) {
    for (uint32_t size : {784, 10}) model.add_layer_sizes(size);
  }
  if (model.name() == "cnn") {
    if (model.layer_sizes().empty()) {
      for (uint32_t size : {128, 10}) model.add_layer_sizes(size);
    }
    if (model.conv_channels().empty()) {
      for (uint32_t size : {32, 64}) model.add_conv_channels(size);
    }
    if (model.input_shape().empty()) {
      for (uint32_t size : {1, 28, 28}) model.add_input_shape(size);
    }
  }
}

void DatasetDefaults(v1::DatasetSpec& dataset) {
  if (dataset.format() == v1::DATASET_FORMAT_UNSPECIFIED) dataset.set_format(v1::IDX);
  if (dataset.format() == v1::IDX && dataset.directory().empty()) {
    dataset.set_directory(kDefaultIdxDirectory);
  }
  if (dataset.format() == v1::SYNTHETIC) {
    if (dataset.synthetic_train_samples() == 0) dataset.set_synthetic_train_samples(4096);
    if (dataset.synthetic_test_samples() == 0) dataset.set_synthetic_test_samples(1024);
    if (dataset.synthetic_features() == 0) dataset.set_synthetic_features(784);
    if (dataset.synthetic_classes() == 0) dataset.set_synthetic_classes(10);
  }
}

// Every entry point (SubmitJob, tributary, train_local) trains with these: the CLI's
// flag defaults are the same values (cli/job_flags.cc), so `{}` and no flags give one
// job. An unset type is MOMENTUM, an unset schedule COSINE: the main job's recipe.
void OptimizerDefaults(v1::OptimizerSpec& optimizer) {
  if (optimizer.type() == v1::OPTIMIZER_TYPE_UNSPECIFIED) optimizer.set_type(v1::MOMENTUM);
  const bool adam = optimizer.type() == v1::ADAM || optimizer.type() == v1::ADAMW;
  if (optimizer.learning_rate() == 0) {
    optimizer.set_learning_rate(adam ? kDefaultAdamLearningRate : kDefaultLearningRate);
  }
  if (optimizer.type() == v1::MOMENTUM && optimizer.momentum() == 0) {
    optimizer.set_momentum(0.9f);
  }
  if (adam) {
    if (optimizer.beta1() == 0) optimizer.set_beta1(0.9f);
    if (optimizer.beta2() == 0) optimizer.set_beta2(0.999f);
    if (optimizer.epsilon() == 0) optimizer.set_epsilon(1e-8f);
  }
  v1::LrSchedule& schedule = *optimizer.mutable_schedule();
  if (schedule.kind() == v1::LR_SCHEDULE_KIND_UNSPECIFIED) schedule.set_kind(v1::COSINE);
  if (schedule.kind() == v1::STEP && schedule.gamma() == 0) schedule.set_gamma(0.1f);
}

absl::Status ValidateTorchScript(const v1::ModelSpec& model) {
  const v1::TorchScriptFile& file = model.torchscript();
  if (!IsSha256Hex(file.sha256())) {
    return Bad("model.torchscript.sha256", "'" + file.sha256() + "'",
               "must be the 64 lowercase hex digits UploadModel answered");
  }
  if (!IsModelFileName(file.file_name())) {
    return Bad("model.torchscript.file_name", "'" + absl::CHexEscape(file.file_name()) + "'",
               "must be 1-255 printable ASCII characters without '/'");
  }
  if (!model.layer_sizes().empty()) {
    return Bad("model.layer_sizes", Sizes(model.layer_sizes()),
               "must be unset for torchscript (the module defines its layers)");
  }
  if (!model.conv_channels().empty()) {
    return Bad("model.conv_channels", Sizes(model.conv_channels()),
               "must be unset for torchscript (the module defines its layers)");
  }
  if (!model.input_shape().empty()) {
    return Bad("model.input_shape", Sizes(model.input_shape()),
               "must be unset for torchscript (the input shape comes from the data)");
  }
  if (model.dropout() != 0) {
    return Bad("model.dropout", model.dropout(),
               "must be 0 for torchscript (the module has its own dropout layers)");
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const v1::ModelSpec& model) {
  const std::string& name = model.name();
  if (name == kTorchScriptModel) return ValidateTorchScript(model);
  if (model.has_torchscript()) {
    return Bad("model.torchscript.sha256", "'" + model.torchscript().sha256() + "'",
               absl::StrCat("is only for model.name 'torchscript', not '", name, "'"));
  }
  if (name != "mlp" && name != "logreg" && name != "cnn") {
    return Bad("model.name", "'" + name + "'", "must be one of logreg, mlp, cnn, torchscript");
  }
  const auto& sizes = model.layer_sizes();
  if (!AllPositive(sizes)) return Bad("model.layer_sizes", Sizes(sizes), "sizes must be > 0");
  if (sizes.size() > kMaxLayers) {
    return Bad("model.layer_sizes", absl::StrCat(sizes.size(), " sizes"),
               absl::StrCat("at most ", kMaxLayers, " are allowed"));
  }
  for (uint32_t size : sizes) {
    if (size > kMaxLayerSize) {
      return Bad("model.layer_sizes", Sizes(sizes),
                 absl::StrCat("each size must be <= ", kMaxLayerSize));
    }
  }
  if (name == "logreg" && sizes.size() != 2) {
    return Bad("model.layer_sizes", Sizes(sizes), "logreg needs [inputs, classes]");
  }
  if (name == "mlp" && sizes.size() < 2) {
    return Bad("model.layer_sizes", Sizes(sizes), "mlp needs [inputs, hidden..., classes]");
  }
  if (name == "cnn") {
    if (sizes.empty()) {
      return Bad("model.layer_sizes", Sizes(sizes), "cnn needs [hidden..., classes]");
    }
    if (model.conv_channels().size() != 2 || !AllPositive(model.conv_channels())) {
      return Bad("model.conv_channels", Sizes(model.conv_channels()),
                 "cnn needs two positive channel counts");
    }
    for (uint32_t channels : model.conv_channels()) {
      if (channels > kMaxConvChannels) {
        return Bad("model.conv_channels", Sizes(model.conv_channels()),
                   absl::StrCat("each must be <= ", kMaxConvChannels));
      }
    }
    if (model.input_shape().size() != 3 || !AllPositive(model.input_shape())) {
      return Bad("model.input_shape", Sizes(model.input_shape()),
                 "cnn needs [channels, height, width]");
    }
    for (uint32_t extent : model.input_shape()) {
      if (extent > kMaxInputExtent) {
        return Bad("model.input_shape", Sizes(model.input_shape()),
                   absl::StrCat("each extent must be <= ", kMaxInputExtent));
      }
    }
    if (model.input_shape(1) < 4 || model.input_shape(2) < 4) {
      return Bad("model.input_shape", Sizes(model.input_shape()),
                 "cnn needs height and width of at least 4 (two 2x2 poolings)");
    }
  }
  if (!(model.dropout() >= 0 && model.dropout() < 1)) {
    return Bad("model.dropout", model.dropout(), "must be in [0, 1)");
  }
  return absl::OkStatus();
}

absl::Status ValidateDataset(const v1::DatasetSpec& dataset) {
  switch (dataset.format()) {
    case v1::IDX:
      if (dataset.directory().empty()) {
        return Bad("dataset.directory", "''", "IDX needs the directory of the IDX files");
      }
      break;
    case v1::CSV:
      if (dataset.train_path().empty()) {
        return Bad("dataset.train_path", "''", "CSV needs a training file");
      }
      break;
    case v1::SYNTHETIC:
      if (dataset.synthetic_classes() < 2 || dataset.synthetic_classes() > kMaxSyntheticClasses) {
        return Bad("dataset.synthetic_classes", dataset.synthetic_classes(),
                   absl::StrCat("must be in [2, ", kMaxSyntheticClasses, "]"));
      }
      if (dataset.synthetic_train_samples() > kMaxSyntheticSamples) {
        return Bad("dataset.synthetic_train_samples", dataset.synthetic_train_samples(),
                   absl::StrCat("must be <= ", kMaxSyntheticSamples));
      }
      if (dataset.synthetic_test_samples() > kMaxSyntheticSamples) {
        return Bad("dataset.synthetic_test_samples", dataset.synthetic_test_samples(),
                   absl::StrCat("must be <= ", kMaxSyntheticSamples));
      }
      if (dataset.synthetic_features() > kMaxSyntheticFeatures) {
        return Bad("dataset.synthetic_features", dataset.synthetic_features(),
                   absl::StrCat("must be <= ", kMaxSyntheticFeatures));
      }
      if ((dataset.synthetic_train_samples() + dataset.synthetic_test_samples()) *
              dataset.synthetic_features() >
          kMaxSyntheticFloats) {
        return Bad("dataset.synthetic_train_samples",
                   absl::StrCat(dataset.synthetic_train_samples(), " (+",
                                dataset.synthetic_test_samples(), " test) x ",
                                dataset.synthetic_features(), " features"),
                   absl::StrCat("the synthetic data may hold at most ", kMaxSyntheticFloats,
                                " floats"));
      }
      break;
    case v1::NPY:
      if (dataset.train_path().empty()) {
        return Bad("dataset.train_path", "''", "NPY needs a training features file");
      }
      if (dataset.train_labels_path().empty()) {
        return Bad("dataset.train_labels_path", "''", "NPY needs a training labels file");
      }
      if (!dataset.test_path().empty() && dataset.test_labels_path().empty()) {
        return Bad("dataset.test_labels_path", "''",
                   "NPY needs a test labels file when test_path is set");
      }
      if (dataset.test_path().empty() && !dataset.test_labels_path().empty()) {
        return Bad("dataset.test_path", "''",
                   "NPY needs a test features file when test_labels_path is set");
      }
      break;
    case v1::TOKENS:
      if (dataset.train_path().empty()) {
        return Bad("dataset.train_path", "''", "TOKENS needs a training token file");
      }
      if (dataset.seq_len() < 1 || dataset.seq_len() > kMaxSeqLen) {
        return Bad("dataset.seq_len", dataset.seq_len(),
                   absl::StrCat("TOKENS needs a window length in [1, ", kMaxSeqLen, "]"));
      }
      if (!dataset.train_labels_path().empty() || !dataset.test_labels_path().empty()) {
        return Bad("dataset.train_labels_path", "'" + dataset.train_labels_path() + "'",
                   "TOKENS has no labels files: the targets are the next ids");
      }
      break;
    default:
      return Bad("dataset.format", dataset.format(), "must be IDX, CSV, SYNTHETIC, NPY or TOKENS");
  }
  return absl::OkStatus();
}

struct ModelShape {
  uint64_t parameters = 0;
  uint64_t widest = 0;       // The widest activation per sample.
  uint64_t activations = 0;  // All layers' activations per sample.
};

// A built-in model's size (the sizes are already bounded: each <= 65536, at most 64
// layers, so the sums cannot overflow 64 bits).
ModelShape ShapeOf(const v1::ModelSpec& model) {
  // A spec that did not pass validation: nothing known.
  if (model.name() == "cnn" ? model.input_shape_size() < 3 || model.conv_channels_size() < 2
                            : model.layer_sizes_size() == 0) {
    return ModelShape{};
  }
  uint64_t parameters = 0, widest = 0, activations = 0;
  std::vector<uint64_t> widths;
  uint64_t in = 0;
  if (model.name() == "cnn") {
    const uint64_t c = model.input_shape(0), h = model.input_shape(1), w = model.input_shape(2);
    const uint64_t c1 = model.conv_channels(0), c2 = model.conv_channels(1);
    parameters += c * c1 * 9 + c1 + c1 * c2 * 9 + c2;
    widest = std::max({c * h * w, c1 * h * w, c2 * (h / 2) * (w / 2)});
    // Input, both convolutions (before and after pooling).
    activations += c * h * w + c1 * h * w + c1 * (h / 2) * (w / 2) + c2 * (h / 2) * (w / 2);
    in = c2 * (h / 4) * (w / 4);
    for (uint32_t size : model.layer_sizes()) widths.push_back(size);
  } else {
    in = model.layer_sizes(0);
    for (int i = 1; i < model.layer_sizes_size(); ++i) widths.push_back(model.layer_sizes(i));
  }
  widest = std::max(widest, in);
  activations += in;
  for (uint64_t out : widths) {
    parameters += in * out + out;
    widest = std::max(widest, out);
    activations += out;
    in = out;
  }
  return ModelShape{parameters, widest, activations};
}

// Parameters and the widest activation of a built-in model for the whole batch,
// against kMaxModelParameters and kMaxActivationFloats.
absl::Status ValidateModelSize(const v1::ModelSpec& model, uint64_t batch) {
  if (IsTorchScript(model)) return absl::OkStatus();  // Checked when the file is loaded.
  const ModelShape shape = ShapeOf(model);
  const uint64_t parameters = shape.parameters, widest = shape.widest;
  if (parameters > kMaxModelParameters) {
    return Bad("model.layer_sizes", Sizes(model.layer_sizes()),
               absl::StrCat("the model would have ", parameters, " parameters; at most ",
                            kMaxModelParameters, " are allowed"));
  }
  if (widest * batch > kMaxActivationFloats) {
    return Bad("global_batch_size", batch,
               absl::StrCat("with a layer of ", widest, " values per sample the batch's "
                            "activations would hold ",
                            widest * batch, " floats; at most ", kMaxActivationFloats,
                            " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

MemoryEstimate EstimateMemory(const v1::JobSpec& spec, uint32_t replicas_sharing_batch) {
  MemoryEstimate estimate;
  if (IsTorchScript(spec.model())) return estimate;  // Unknown until the file is loaded.
  const ModelShape shape = ShapeOf(spec.model());
  const uint64_t sharing = std::max<uint64_t>(1, replicas_sharing_batch);
  const uint64_t batch = (spec.global_batch_size() + sharing - 1) / sharing;
  estimate.parameters = shape.parameters;
  // Values, gradients, the pulled copy and the reduction buffer; the activations and
  // their gradients of every layer for the replica's share of the batch.
  estimate.replica_bytes = 4 * 4 * shape.parameters + 2 * 4 * shape.activations * batch;
  const v1::DatasetSpec& data = spec.dataset();
  if (data.format() == v1::SYNTHETIC) {
    estimate.data_bytes = 4 * (data.synthetic_train_samples() + data.synthetic_test_samples()) *
                          (data.synthetic_features() + 1);
  }
  return estimate;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::COMPLETED || state == v1::FAILED || state == v1::STOPPED;
}

bool IsJobId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsModelFileName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    if (c < 0x20 || c > 0x7e || c == '/' || c == '\\') return false;
  }
  return true;
}

uint64_t EvalIntervalSteps(const v1::JobSpec& spec, uint64_t total_steps) {
  if (spec.eval_interval_steps() > 0) return spec.eval_interval_steps();
  // Rounded up without overflowing at 2^64 - 1.
  const uint64_t per_evaluation = total_steps / kDefaultEvaluationsPerRun +
                                  (total_steps % kDefaultEvaluationsPerRun != 0 ? 1 : 0);
  return std::max<uint64_t>(1, per_evaluation);
}

uint64_t PeriodicEvalSamples(const v1::JobSpec& spec) {
  return spec.eval_samples() > 0 ? spec.eval_samples() : kDefaultEvalSamples;
}

bool EvaluatesAfter(const v1::JobSpec& spec, uint64_t steps_done, uint64_t total_steps) {
  return steps_done >= total_steps || steps_done % EvalIntervalSteps(spec, total_steps) == 0;
}

uint64_t EvalSamplesAfter(const v1::JobSpec& spec, uint64_t steps_done, uint64_t total_steps) {
  return steps_done >= total_steps ? 0 : PeriodicEvalSamples(spec);
}

v1::JobSpec WithDefaults(v1::JobSpec spec) {
  if (spec.name().empty()) spec.set_name("job");
  ModelDefaults(*spec.mutable_model());
  DatasetDefaults(*spec.mutable_dataset());
  if (spec.global_batch_size() == 0) spec.set_global_batch_size(64);
  if (spec.epochs() == 0 && spec.max_steps() == 0) spec.set_epochs(kDefaultEpochs);
  OptimizerDefaults(*spec.mutable_optimizer());
  if (spec.mode() == v1::TRAINING_MODE_UNSPECIFIED) spec.set_mode(v1::SYNC);
  if (spec.mode() == v1::BOUNDED_STALENESS && spec.staleness() == 0) spec.set_staleness(4);
  if (spec.mode() == v1::LOCAL_SGD) {
    if (spec.sync_every() == 0) spec.set_sync_every(kDefaultSyncEvery);
    v1::OptimizerSpec& outer = *spec.mutable_outer_optimizer();
    // Plain averaging unless asked otherwise: SGD at a constant rate 1 (a MOMENTUM
    // outer optimizer also at rate 1 unless given).
    if (outer.type() == v1::OPTIMIZER_TYPE_UNSPECIFIED) outer.set_type(v1::SGD);
    if (outer.learning_rate() == 0) outer.set_learning_rate(1.0f);
    if (outer.schedule().kind() == v1::LR_SCHEDULE_KIND_UNSPECIFIED) {
      outer.mutable_schedule()->set_kind(v1::CONSTANT);
    }
    OptimizerDefaults(outer);
  }
  if (spec.nodes_min() == 0) spec.set_nodes_min(1);
  if (spec.nodes_max() == 0) spec.set_nodes_max(spec.nodes_min());
  if (spec.replicas_per_worker() == 0) spec.set_replicas_per_worker(1);
  if (spec.devices() == v1::DEVICE_KIND_UNSPECIFIED) spec.set_devices(v1::AUTO);
  if (spec.partition_bytes() == 0) spec.set_partition_bytes(kDefaultPartitionBytes);
  if (spec.partition_cut() == v1::PARTITION_CUT_UNSPECIFIED) spec.set_partition_cut(v1::CUT_AUTO);
  if (spec.wire_dtype() == v1::DTYPE_UNSPECIFIED) spec.set_wire_dtype(v1::FLOAT32);
  if (spec.seed() == 0) spec.set_seed(1);
  return spec;
}

namespace {

// Workers and shards confine every path a job names to their roots and refuse '..';
// said here, at submission, rather than by each of them once the job starts.
absl::Status ValidatePaths(const v1::JobSpec& spec) {
  for (const auto& [field, path] : {std::pair<const char*, const std::string*>{
                                        "dataset.directory", &spec.dataset().directory()},
                                    {"dataset.train_path", &spec.dataset().train_path()},
                                    {"dataset.test_path", &spec.dataset().test_path()},
                                    {"dataset.train_labels_path", &spec.dataset().train_labels_path()},
                                    {"dataset.test_labels_path", &spec.dataset().test_labels_path()},
                                    {"checkpoint_dir", &spec.checkpoint_dir()},
                                    {"init_from", &spec.init_from()}}) {
    for (absl::string_view part : absl::StrSplit(*path, '/')) {
      if (part == "..") {
        return Bad(field, "'" + path->substr(0, 256) + "'",
                   "'..' is not allowed in a path (workers and shards refuse it: name the "
                   "directory itself)");
      }
    }
  }
  return absl::OkStatus();
}

// The mode and how the job is spread: nodes, replicas, devices.
absl::Status ValidateDistribution(const v1::JobSpec& spec) {
  if (!v1::TrainingMode_IsValid(spec.mode()) || spec.mode() == v1::TRAINING_MODE_UNSPECIFIED) {
    return Bad("mode", spec.mode(), "must be SYNC, ASYNC, BOUNDED_STALENESS or LOCAL_SGD");
  }
  if (spec.mode() == v1::LOCAL_SGD) {
    if (spec.sync_every() == 0 || spec.sync_every() > kMaxSyncEvery) {
      return Bad("sync_every", spec.sync_every(), absl::StrCat("must be in [1, ", kMaxSyncEvery, "]"));
    }
    const v1::OptimizerSpec& outer = spec.outer_optimizer();
    if (outer.type() != v1::SGD && outer.type() != v1::MOMENTUM) {
      return Bad("outer_optimizer.type", v1::OptimizerType_Name(outer.type()),
                 "must be SGD or MOMENTUM");
    }
    if (absl::StatusOr<Optimizer> optimizer = Optimizer::Create(outer, 1); !optimizer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("outer_", optimizer.status().message()));
    }
  }
  if (spec.mode() == v1::BOUNDED_STALENESS && spec.staleness() == 0) {
    return Bad("staleness", 0, "must be > 0 for BOUNDED_STALENESS");
  }
  if (spec.staleness() > kMaxStaleness) {
    return Bad("staleness", spec.staleness(), absl::StrCat("must be <= ", kMaxStaleness));
  }
  if (spec.nodes_min() == 0 || spec.nodes_min() > kMaxJobNodes) {
    return Bad("nodes_min", spec.nodes_min(), absl::StrCat("must be in [1, ", kMaxJobNodes, "]"));
  }
  if (spec.nodes_max() > kMaxJobNodes) {
    return Bad("nodes_max", spec.nodes_max(), absl::StrCat("must be <= ", kMaxJobNodes));
  }
  if (spec.nodes_max() < spec.nodes_min()) {
    return Bad("nodes_max", spec.nodes_max(),
               absl::StrCat("must be >= nodes_min (", spec.nodes_min(), ")"));
  }
  if (spec.replicas_per_worker() == 0 || spec.replicas_per_worker() > 64) {
    return Bad("replicas_per_worker", spec.replicas_per_worker(), "must be in [1, 64]");
  }
  if (!v1::DeviceKind_IsValid(spec.devices()) || spec.devices() == v1::DEVICE_KIND_UNSPECIFIED) {
    return Bad("devices", spec.devices(), "must be AUTO, CPU or GPU");
  }
  if (spec.devices() == v1::GPU && IsTorchScript(spec.model())) {
    return Bad("devices", "GPU",
               "torchscript models run on CPU only (Debian's LibTorch has no CUDA); use CPU or "
               "AUTO");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (spec.name().size() > 128) return Bad("name", spec.name().size(), "must be <= 128 chars");
  if (absl::Status paths = ValidatePaths(spec); !paths.ok()) return paths;
  if (absl::Status model = ValidateModel(spec.model()); !model.ok()) return model;
  if (absl::Status dataset = ValidateDataset(spec.dataset()); !dataset.ok()) return dataset;
  if (spec.dataset().format() == v1::TOKENS && !IsTorchScript(spec.model())) {
    return Bad("model.name", "'" + spec.model().name() + "'",
               "TOKENS data (int64 token windows) needs a TorchScript model with its own "
               "loss(x, y); the native models take float features and class ids");
  }
  if (spec.global_batch_size() == 0 || spec.global_batch_size() > kMaxGlobalBatch) {
    return Bad("global_batch_size", spec.global_batch_size(),
               absl::StrCat("must be in [1, ", kMaxGlobalBatch, "]"));
  }
  if (spec.epochs() == 0 && spec.max_steps() == 0) {
    return Bad("epochs", 0, "epochs or max_steps must be > 0");
  }
  if (spec.epochs() > kMaxJobEpochs) {
    return Bad("epochs", spec.epochs(), absl::StrCat("must be <= ", kMaxJobEpochs));
  }
  if (spec.max_steps() > kMaxJobSteps) {
    return Bad("max_steps", spec.max_steps(), absl::StrCat("must be <= ", kMaxJobSteps));
  }
  if (absl::Status size = ValidateModelSize(spec.model(), spec.global_batch_size());
      !size.ok()) {
    return size;
  }
  if (absl::StatusOr<Optimizer> optimizer = Optimizer::Create(spec.optimizer(), 1);
      !optimizer.ok()) {
    return optimizer.status();
  }
  if (absl::Status mode = ValidateDistribution(spec); !mode.ok()) return mode;
  if (spec.partition_bytes() < kMinPartitionBytes ||
      spec.partition_bytes() > kMaxPartitionBytes || spec.partition_bytes() % 4 != 0) {
    return Bad("partition_bytes", spec.partition_bytes(),
               absl::StrCat("must be a multiple of 4 in [", kMinPartitionBytes, ", ",
                            kMaxPartitionBytes, "]"));
  }
  if (!v1::PartitionCut_IsValid(spec.partition_cut()) ||
      spec.partition_cut() == v1::PARTITION_CUT_UNSPECIFIED) {
    return Bad("partition_cut", spec.partition_cut(), "must be CUT_AUTO, CUT_EVEN or CUT_LAYERS");
  }
  if (!v1::DType_IsValid(spec.wire_dtype()) || spec.wire_dtype() == v1::DTYPE_UNSPECIFIED) {
    return Bad("wire_dtype", spec.wire_dtype(), "must be FLOAT32, FLOAT16 or BFLOAT16");
  }
  if (spec.pending_timeout_seconds() > kMaxPendingTimeoutSeconds) {
    return Bad("pending_timeout_seconds", spec.pending_timeout_seconds(),
               absl::StrCat("must be <= ", kMaxPendingTimeoutSeconds, " (a year)"));
  }
  if (!spec.resume_from().empty() && !IsJobId(spec.resume_from())) {
    return Bad("resume_from", "'" + absl::CHexEscape(spec.resume_from().substr(0, 160)) + "'",
               "must be a job id: 1-128 characters of [A-Za-z0-9._-]");
  }
  if (spec.init_from().size() > kMaxInitFromBytes ||
      spec.init_from().find('\0') != std::string::npos) {
    return Bad("init_from", absl::StrCat(spec.init_from().size(), " bytes"),
               absl::StrCat("must be a path of at most ", kMaxInitFromBytes,
                            " bytes without NUL"));
  }
  if (!spec.resume_from().empty() && !spec.init_from().empty()) {
    return Bad("init_from", "'" + spec.init_from() + "'",
               "cannot be given with resume_from (resume takes the parameters from the "
               "checkpoint)");
  }
  return absl::OkStatus();
}

const v1::OptimizerSpec& PsOptimizerSpec(const v1::JobSpec& spec) {
  return spec.mode() == v1::LOCAL_SGD ? spec.outer_optimizer() : spec.optimizer();
}

v1::PartitionCut ResolvedPartitionCut(const v1::JobSpec& spec, bool all_replicas_on_gpus) {
  if (spec.partition_cut() == v1::CUT_EVEN || spec.partition_cut() == v1::CUT_LAYERS) {
    return spec.partition_cut();
  }
  // Measured (docs/performance.md): on an H200 the layer cut took a SYNC step from
  // 1.06 to 0.80 ms, and LOCAL_SGD, which pushes once a round, was slower with it; on
  // CPU workers sharing cores with the shards its extra messages cost more than the
  // overlap gains.
  const bool sync = spec.mode() == v1::SYNC || spec.mode() == v1::TRAINING_MODE_UNSPECIFIED;
  return sync && all_replicas_on_gpus ? v1::CUT_LAYERS : v1::CUT_EVEN;
}

v1::PartitionCut StoredPartitionCut(const v1::JobSpec& stored) {
  return stored.partition_cut() == v1::CUT_LAYERS ? v1::CUT_LAYERS : v1::CUT_EVEN;
}

bool EndsSyncRound(const v1::JobSpec& spec, uint64_t step, uint64_t total_steps) {
  if (spec.mode() != v1::LOCAL_SGD || spec.sync_every() <= 1) return true;
  return (step + 1) % spec.sync_every() == 0 || step + 1 == total_steps;
}

uint64_t StepsPerEpoch(const v1::JobSpec& spec, uint64_t train_samples) {
  const uint64_t batch = spec.global_batch_size();
  return batch == 0 ? 0 : (train_samples + batch - 1) / batch;
}

uint64_t TotalSteps(const v1::JobSpec& spec, uint64_t train_samples) {
  uint64_t steps = spec.epochs() > 0 ? spec.epochs() * StepsPerEpoch(spec, train_samples)
                                     : spec.max_steps();
  if (spec.max_steps() > 0 && spec.max_steps() < steps) steps = spec.max_steps();
  return steps;
}

uint64_t BatchSizeOfStep(const v1::JobSpec& spec, uint64_t train_samples, uint64_t step) {
  const uint64_t per_epoch = StepsPerEpoch(spec, train_samples);
  if (per_epoch == 0) return 0;
  const uint64_t index = step % per_epoch;
  const uint64_t batch = spec.global_batch_size();
  return index + 1 < per_epoch ? batch : train_samples - index * batch;
}

}  // namespace tributary
