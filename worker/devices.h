// What a worker can compute on: the --devices flag and the discovery of CPU and
// CUDA devices it reports to the coordinator when it registers.
#ifndef TRIBUTARY_WORKER_DEVICES_H_
#define TRIBUTARY_WORKER_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace tributary::worker {

// --devices: "auto" (GPUs when present, else CPU), "cpu", "gpu" (every GPU) or
// "gpu:0,2" (exactly those CUDA ordinals).
struct DeviceRequest {
  enum class Kind { kAuto, kCpu, kGpu };
  Kind kind = Kind::kAuto;
  std::vector<int> gpus;  // Explicit ordinals for "gpu:..."; empty otherwise.
};

// INVALID_ARGUMENT naming the flag value for anything else.
absl::StatusOr<DeviceRequest> ParseDeviceRequest(const std::string& flag);

// The devices to report: the CPU always (unless the request is GPU-only), plus the CUDA
// devices visible in a --config=cuda build. Asking for GPUs where there are none, or for
// an ordinal that does not exist, is FAILED_PRECONDITION with CUDA's reason.
absl::StatusOr<std::vector<v1::Device>> DiscoverDevices(const DeviceRequest& request);

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_DEVICES_H_
