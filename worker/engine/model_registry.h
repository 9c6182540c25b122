// Models by name. A model is one file under worker/engine/models/ that builds a
// ModelDef from the job's ModelSpec and registers itself:
//
//   TRIBUTARY_REGISTER_MODEL("mlp", BuildMlp);
//
// The `models` target is alwayslink, so linking it is enough to see every model.
#ifndef TRIBUTARY_WORKER_ENGINE_MODEL_REGISTRY_H_
#define TRIBUTARY_WORKER_ENGINE_MODEL_REGISTRY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/model.h"

namespace tributary::engine {

using ModelFactory = std::function<absl::StatusOr<ModelDef>(const v1::ModelSpec&)>;

// Registers `factory` under `name`; returns true so it can initialise a static.
// A second registration of the same name is a programming error and aborts.
bool RegisterModel(const std::string& name, ModelFactory factory);

// Builds the model the spec names (defaults applied: common/job_spec.h WithDefaults).
// NOT_FOUND naming the model and the registered names for an unknown name.
absl::StatusOr<ModelDef> BuildModel(const v1::ModelSpec& spec);

std::vector<std::string> RegisteredModels();

}  // namespace tributary::engine

#define TRIBUTARY_REGISTER_MODEL(name, factory)            \
  static const bool tributary_model_registered_##factory = \
      ::tributary::engine::RegisterModel(name, factory)

#endif  // TRIBUTARY_WORKER_ENGINE_MODEL_REGISTRY_H_
