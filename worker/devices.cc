#include "worker/devices.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/usable_cores.h"

#if defined(TRIBUTARY_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace tributary::worker {
namespace {

v1::Device CpuDevice() {
  v1::Device cpu;
  cpu.set_kind(v1::CPU);
  cpu.set_index(-1);
  cpu.set_name("cpu");
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    cpu.set_memory_bytes(static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size));
  }
  cpu.set_cpu_cores(static_cast<uint32_t>(UsableCores()));
  return cpu;
}

// CUDA devices visible to this process, or the reason there are none.
std::vector<v1::Device> CudaDevices(std::string* why) {
  std::vector<v1::Device> devices;
#if defined(TRIBUTARY_WITH_CUDA)
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(error));
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, i) != cudaSuccess) continue;
    v1::Device gpu;
    gpu.set_kind(v1::GPU);
    gpu.set_index(i);
    gpu.set_name(properties.name);
    gpu.set_memory_bytes(properties.totalGlobalMem);
    std::string uuid = "GPU-";
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
    for (int b = 0; b < 16; ++b) {
      if (b == 4 || b == 6 || b == 8 || b == 10) uuid += "-";
      absl::StrAppend(&uuid, absl::Hex(bytes[b], absl::kZeroPad2));
    }
    gpu.set_uuid(uuid);
    devices.push_back(gpu);
  }
  if (count == 0) *why = "the CUDA driver reports no devices";
#else
  *why = "this worker was built without --config=cuda";
#endif
  return devices;
}

}  // namespace

absl::StatusOr<DeviceRequest> ParseDeviceRequest(const std::string& flag) {
  DeviceRequest request;
  if (flag == "auto") return request;
  if (flag == "cpu") {
    request.kind = DeviceRequest::Kind::kCpu;
    return request;
  }
  if (flag == "gpu") {
    request.kind = DeviceRequest::Kind::kGpu;
    return request;
  }
  if (flag.rfind("gpu:", 0) == 0) {
    request.kind = DeviceRequest::Kind::kGpu;
    for (absl::string_view part : absl::StrSplit(flag.substr(4), ',')) {
      int ordinal = -1;
      if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--devices=", flag, ": '", std::string(part), "' is not a GPU ordinal"));
      }
      if (std::find(request.gpus.begin(), request.gpus.end(), ordinal) != request.gpus.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices=", flag, ": GPU ", ordinal, " listed twice"));
      }
      request.gpus.push_back(ordinal);
    }
    if (!request.gpus.empty()) return request;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--devices=", flag, ": expected auto, cpu, gpu or gpu:N[,N...]"));
}

absl::StatusOr<std::vector<v1::Device>> DiscoverDevices(const DeviceRequest& request) {
  std::vector<v1::Device> devices;
  if (request.kind != DeviceRequest::Kind::kGpu) devices.push_back(CpuDevice());
  if (request.kind == DeviceRequest::Kind::kCpu) return devices;
  std::string why;
  std::vector<v1::Device> gpus = CudaDevices(&why);
  if (request.kind == DeviceRequest::Kind::kGpu && gpus.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("--devices asks for GPUs: ", why));
  }
  for (int ordinal : request.gpus) {
    if (ordinal >= static_cast<int>(gpus.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--devices asks for GPU ", ordinal, " but ", gpus.size(), " are visible"));
    }
  }
  for (const v1::Device& gpu : gpus) devices.push_back(gpu);
  return devices;
}

}  // namespace tributary::worker
