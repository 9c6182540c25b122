// Creates CPU or GPU replicas. GPU replicas exist only in a --config=cuda build; in
// a CPU-only build asking for one is an UNAVAILABLE error that says so.
#ifndef TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_
#define TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_

#include <cstddef>
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

// Host memory page-locked for GPU replicas' copies while this object lives: their
// SetParameters then uploads from it without staging it first (issue 25). Destroy it
// before the memory is freed.
class PinnedHostMemory {
 public:
  explicit PinnedHostMemory(void* p) : p_(p) {}
  ~PinnedHostMemory();
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;

 private:
  void* p_;
};

// Page-locks host memory [p, p + bytes) (cudaHostRegister). UNAVAILABLE in a CPU-only
// build, without a device, or where the driver refuses (its error named); GPU replicas
// then stage their uploads, as before.
absl::StatusOr<std::unique_ptr<PinnedHostMemory>> PinHostMemory(void* p, size_t bytes);

// host_parameters: the shared host buffer (num_parameters floats). CPU replicas read
// it in place; GPU replicas copy it to the device now and on SetParameters.
absl::StatusOr<std::unique_ptr<Replica>> CreateReplica(const ModelDef& model,
                                                       const DeviceSpec& device,
                                                       const float* host_parameters);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_REPLICA_FACTORY_H_
