// Creates CPU or GPU replicas. GPU replicas exist only in a --config=cuda build; in
// a CPU-only build asking for one is an UNAVAILABLE error that says so.
#ifndef TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_
#define TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/model.h"
#include "worker/engine/replica.h"

namespace tributary::engine {

struct DeviceSpec {
  enum class Kind { kCpu, kGpu };
  Kind kind = Kind::kCpu;
  int gpu = 0;  // CUDA device ordinal for kGpu.
};

// True in a --config=cuda build.
bool BuiltWithCuda();

// CUDA devices visible to this process; 0 in a CPU-only build or without a driver.
// `why` (optional) receives the reason when there are none.
int CudaDeviceCount(std::string* why = nullptr);

// host_parameters: the shared host buffer (num_parameters floats). CPU replicas read
// it in place; GPU replicas copy it to the device now and on SetParameters.
absl::StatusOr<std::unique_ptr<Replica>> CreateReplica(const ModelDef& model,
                                                       const DeviceSpec& device,
                                                       const float* host_parameters);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_
