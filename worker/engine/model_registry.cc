#include "worker/engine/model_registry.h"

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace tributary::engine {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, ModelFactory> factories ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

bool RegisterModel(const std::string& name, ModelFactory factory) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  if (!registry.factories.emplace(name, std::move(factory)).second) {
    fprintf(stderr, "model '%s' registered twice\n", name.c_str());
    std::abort();
  }
  return true;
}

std::vector<std::string> RegisteredModels() {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  std::vector<std::string> names;
  for (const auto& entry : registry.factories) names.push_back(entry.first);
  return names;
}

absl::StatusOr<ModelDef> BuildModel(const v1::ModelSpec& spec) {
  ModelFactory factory;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.factories.find(spec.name());
    if (it != registry.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::NotFoundError(
        absl::StrCat("model.name: unknown model '", spec.name(),
                     "', registered: ", absl::StrJoin(RegisteredModels(), ", ")));
  }
  return factory(spec);
}

}  // namespace tributary::engine
