// The job flags' model section (job_flags.h).
#include "common/job_flags_internal.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/job_spec.h"
#include "common/model_file.h"
#include "common/sha256.h"

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

namespace tributary::job_flags {

absl::Status ApplyModelFlags(const FlagUse& use, v1::JobSpec& spec,
                             std::shared_ptr<const std::string>* model_file) {
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
        ReadModelFile(model_path, kMaxModelFileBytes);
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
  return absl::OkStatus();
}

}  // namespace tributary::job_flags
