// A model as the engine runs it: a sequence of layers over one flat float32
// parameter buffer, with named tensor views in a stable order. Backends (CPU, GPU)
// execute a ModelDef; they never own its structure. Native models are built with
// ModelBuilder and registered by name (model_registry.h); a TorchScript model
// (torchscript.h) has no layers here, only its tensors and the file LibTorch runs.
#ifndef TRIBUTARY_WORKER_ENGINE_MODEL_H_
#define TRIBUTARY_WORKER_ENGINE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tensor.pb.h"

namespace tributary::engine {

enum class LayerKind { kLinear, kRelu, kTanh, kConv2d, kMaxPool2d, kFlatten, kDropout };

const char* LayerKindName(LayerKind kind);

// Shape of one sample's activations: [channels, height, width] for images, and
// [features, 1, 1] for vectors. Activations are stored sample-major ([N, C, H, W]).
struct Shape {
  int64_t channels = 0;
  int64_t height = 1;
  int64_t width = 1;
  int64_t size() const { return channels * height * width; }
  bool operator==(const Shape& o) const {
    return channels == o.channels && height == o.height && width == o.width;
  }
};

// A parameter tensor's place in the flat buffer.
struct TensorRange {
  int64_t offset = 0;
  int64_t length = 0;
};

struct LayerSpec {
  LayerKind kind;
  std::string name;  // "fc1", "conv2", "relu3", ...
  Shape in;
  Shape out;
  // kLinear: weight [out, in] row-major, bias [out].
  // kConv2d: weight [out_channels, in_channels, kernel, kernel], bias [out_channels].
  TensorRange weight;
  TensorRange bias;
  int kernel = 0;              // kConv2d, kMaxPool2d: square window side.
  int stride = 1;              // kConv2d, kMaxPool2d.
  int padding = 0;             // kConv2d: zeros on each side.
  float dropout = 0;           // kDropout: probability of zeroing an element.
  uint32_t dropout_index = 0;  // kDropout: 0-based among the model's dropout layers.
  bool has_parameters() const { return weight.length > 0; }
};

// One named parameter tensor (a view into the flat buffer).
struct TensorInfo {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // [256, 784]
  int64_t offset = 0;
  int64_t length = 0;
  int64_t fan_in = 0;  // Inputs feeding one output: sets the init bound.
  int layer = 0;       // Index into ModelDef::layers.
  // A model buffer (TorchScript: BatchNorm running statistics, frozen parameters):
  // never trained; node 0's replica 0 holds the job's values (tensor.proto).
  bool buffer = false;
};

// What a sample's inputs are made of as the model sees them: float32 (IDX pixels in
// [0, 1], CSV numbers, float NPY arrays), or int64 (integer NPY arrays and token ids,
// never scaled). Native models take float32 only.
enum class FeatureType { kFloat32, kInt64 };

// What a sample's target is: one class id (the default; `labels`), integer values of
// shape target_dims (token ids of a sequence, several labels: `int_targets`), or
// float values of shape target_dims (regression: `float_targets`). Only a TorchScript
// model with its own `loss` takes the last two.
enum class TargetKind { kClassId, kInt64, kFloat32 };

const char* FeatureTypeName(FeatureType type);   // "float32" / "int64"
const char* TargetKindName(TargetKind kind);     // "class ids" / "int64" / "float32"

// What a TorchScript model carries besides its tensors (torchscript.h).
struct TorchScriptSource {
  std::string file_name;                    // As the user named it, for messages.
  std::string sha256;                       // Hex digest of `bytes`.
  std::shared_ptr<const std::string> bytes;  // The saved module, as uploaded.
  std::vector<int64_t> sample_dims;         // One sample's input shape, from the data.
  FeatureType input_type = FeatureType::kFloat32;  // From the data, likewise.
  TargetKind target_kind = TargetKind::kClassId;
  std::vector<int64_t> target_dims;  // One sample's target shape (not kClassId).
  bool has_loss = false;             // The module defines `loss(x, y)`.
  bool has_metrics = false;          // The module defines `metrics(x, y)`.
};

// The executable description of a model. Immutable once built; shared by all replicas.
struct ModelDef {
  std::string name;
  Shape input;
  int64_t num_classes = 0;
  std::vector<LayerSpec> layers;
  std::vector<TensorInfo> tensors;  // Buffer order: by layer, weight before bias.
  int64_t num_parameters = 0;       // Length of the flat buffer.
  // Elements [0, num_trained) are trained; [num_trained, num_parameters) are buffers
  // (TensorInfo::buffer). Native models have no buffers.
  int64_t num_trained = 0;
  // Elements of one sample's loss: 1 for the cross-entropy and an [N] loss, T for an
  // [N, T] one. A node's gradient sum is over samples * this many elements, and the PS
  // divides by that count (what the mean over the global batch's elements needs).
  int64_t loss_elements_per_sample = 1;
  // TorchScript models with `metrics`: the names it reported when fitted, sorted.
  std::vector<std::string> metric_names;
  // What fitting the model to the data found worth saying without refusing it (a
  // softmax head under the cross-entropy): the pre-flight prints these, workers log them.
  std::vector<std::string> fit_warnings;
  // TorchScript models: the file and its own initial values (num_parameters floats,
  // used instead of the seeded initialisation). Null for native models.
  std::shared_ptr<const TorchScriptSource> torchscript;
  std::shared_ptr<const std::vector<float>> initial_values;

  // The layout proto the worker and the PS share (tensor.proto).
  v1::ParameterLayout Layout() const;
  // Index into `tensors` of the tensor holding flat element `offset`, or -1.
  int TensorAt(int64_t offset) const;
  // Multiply-adds of one sample's forward pass (backward costs about twice that).
  int64_t ForwardMacsPerSample() const;
};

// Writes the initial parameters of `model` for `seed` into params[0, num_parameters):
// weights and biases uniform in +-1/sqrt(fan_in) (PyTorch's default for Linear and
// Conv2d), each element a pure function of (seed, flat index), so every party gets
// the same bits. A model with initial_values (TorchScript: the file's own parameters
// and buffers) copies those instead; the seed plays no part then.
void InitParameters(const ModelDef& model, uint64_t seed, float* params);

// Builds a ModelDef layer by layer, checking shapes as it goes. Errors are kept and
// returned by Build(), so a factory can chain calls without checking each one.
//
//   ModelBuilder b("cnn", Shape{1, 28, 28});
//   b.Conv2d("conv1", 32, /*kernel=*/3, /*stride=*/1, /*padding=*/1).Relu().MaxPool2d(2)
//    .Flatten().Linear("fc1", 128).Relu().Dropout(0.5).Linear("fc2", 10);
//   absl::StatusOr<ModelDef> model = std::move(b).Build();
class ModelBuilder {
 public:
  ModelBuilder(std::string model_name, Shape input);

  ModelBuilder& Linear(const std::string& name, int64_t outputs);
  ModelBuilder& Conv2d(const std::string& name, int64_t out_channels, int kernel, int stride,
                       int padding);
  ModelBuilder& MaxPool2d(int kernel);  // stride == kernel, floor division.
  ModelBuilder& Relu();
  ModelBuilder& Tanh();
  ModelBuilder& Flatten();
  ModelBuilder& Dropout(float p);  // p == 0 adds nothing.

  // The finished model; the last layer's output size is the number of classes.
  absl::StatusOr<ModelDef> Build() &&;

 private:
  LayerSpec& Add(LayerKind kind, std::string name, Shape out);
  TensorRange AddTensor(const std::string& name, std::vector<int64_t> shape, int64_t fan_in);

  ModelDef model_;
  Shape current_;
  uint32_t dropout_layers_ = 0;
  absl::Status error_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_MODEL_H_
