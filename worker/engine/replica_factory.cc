#include "worker/engine/replica_factory.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/torchscript.h"

#if defined(TRIBUTARY_WITH_CUDA)
#include "worker/engine/gpu_replica.h"
#endif

namespace tributary::engine {

bool BuiltWithCuda() {
#if defined(TRIBUTARY_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount(std::string* why) {
#if defined(TRIBUTARY_WITH_CUDA)
  return GpuDeviceCount(why);
#else
  if (why != nullptr) *why = "built without --config=cuda";
  return 0;
#endif
}

PinnedHostMemory::~PinnedHostMemory() {
#if defined(TRIBUTARY_WITH_CUDA)
  UnregisterHostMemory(p_);
#endif
}

absl::StatusOr<std::unique_ptr<PinnedHostMemory>> PinHostMemory(void* p, size_t bytes) {
#if defined(TRIBUTARY_WITH_CUDA)
  std::string why;
  if (GpuDeviceCount(&why) == 0) return absl::UnavailableError(why);
  if (absl::Status registered = RegisterHostMemory(p, bytes); !registered.ok()) {
    return registered;
  }
  return std::make_unique<PinnedHostMemory>(p);
#else
  return absl::UnavailableError("host memory is page-locked for GPU replicas only, and this "
                                "binary was built without --config=cuda");
#endif
}

absl::StatusOr<std::unique_ptr<Replica>> CreateReplica(const ModelDef& model,
                                                       const DeviceSpec& device,
                                                       const float* host_parameters) {
  if (model.torchscript != nullptr) {
    if (device.kind != DeviceSpec::Kind::kCpu) {
      return absl::UnavailableError(absl::StrCat(
          "model ", model.name, " on cuda:", device.gpu,
          ": TorchScript models run on the CPU only (Debian's LibTorch has no CUDA)"));
    }
    return CreateTorchScriptReplica(model, host_parameters);
  }
  if (device.kind == DeviceSpec::Kind::kCpu) {
    return std::unique_ptr<Replica>(new CpuReplica(model, host_parameters));
  }
#if defined(TRIBUTARY_WITH_CUDA)
  absl::StatusOr<std::unique_ptr<GpuReplica>> gpu =
      GpuReplica::Create(model, device.gpu, host_parameters);
  if (!gpu.ok()) return gpu.status();
  return std::unique_ptr<Replica>(std::move(*gpu));
#else
  return absl::UnavailableError(absl::StrCat("GPU replica on cuda:", device.gpu,
                                             ": this binary was built without --config=cuda"));
#endif
}

}  // namespace tributary::engine
