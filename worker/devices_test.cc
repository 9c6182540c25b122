// --devices parsing and device discovery in the build at hand (CPU-only unless
// --config=cuda).
#include "worker/devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseDeviceRequestTest, NamedKinds) {
  absl::StatusOr<DeviceRequest> automatic = ParseDeviceRequest("auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->kind, DeviceRequest::Kind::kAuto);
  EXPECT_TRUE(automatic->gpus.empty());
  absl::StatusOr<DeviceRequest> cpu = ParseDeviceRequest("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, DeviceRequest::Kind::kCpu);
  absl::StatusOr<DeviceRequest> gpu = ParseDeviceRequest("gpu");
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->kind, DeviceRequest::Kind::kGpu);
  EXPECT_TRUE(gpu->gpus.empty());
}

TEST(ParseDeviceRequestTest, ExplicitOrdinalsKeepTheirOrder) {
  absl::StatusOr<DeviceRequest> one = ParseDeviceRequest("gpu:0");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->kind, DeviceRequest::Kind::kGpu);
  EXPECT_THAT(one->gpus, ElementsAre(0));
  absl::StatusOr<DeviceRequest> several = ParseDeviceRequest("gpu:3,1,2");
  ASSERT_TRUE(several.ok()) << several.status();
  EXPECT_THAT(several->gpus, ElementsAre(3, 1, 2));
}

TEST(ParseDeviceRequestTest, BadValuesNameTheFlagAndThePart) {
  struct Case {
    const char* flag;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "expected auto, cpu, gpu or gpu:N[,N...]"},
        Case{"GPU", "expected auto, cpu, gpu or gpu:N[,N...]"},
        Case{"tpu", "--devices=tpu: expected"}, Case{"cpu:0", "--devices=cpu:0: expected"},
        Case{"gpu:", "'' is not a GPU ordinal"}, Case{"gpu:a", "'a' is not a GPU ordinal"},
        Case{"gpu:-1", "'-1' is not a GPU ordinal"}, Case{"gpu:0,,1", "'' is not a GPU ordinal"},
        Case{"gpu:1,1", "--devices=gpu:1,1: GPU 1 listed twice"}}) {
    absl::StatusOr<DeviceRequest> request = ParseDeviceRequest(c.flag);
    ASSERT_FALSE(request.ok()) << "'" << c.flag << "' was accepted";
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(request.status().message(), HasSubstr(c.says)) << c.flag;
  }
}

TEST(DiscoverDevicesTest, TheCpuIsAlwaysThereUnlessOnlyGpusAreAsked) {
  DeviceRequest cpu;
  cpu.kind = DeviceRequest::Kind::kCpu;
  absl::StatusOr<std::vector<v1::Device>> devices = DiscoverDevices(cpu);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 1u);
  const v1::Device& only = devices->front();
  EXPECT_EQ(only.kind(), v1::CPU);
  EXPECT_EQ(only.index(), -1);
  EXPECT_EQ(only.name(), "cpu");
  EXPECT_GE(only.cpu_cores(), 1u);
  EXPECT_GT(only.memory_bytes(), 0u);

  absl::StatusOr<std::vector<v1::Device>> automatic = DiscoverDevices(DeviceRequest());
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  ASSERT_FALSE(automatic->empty());
  EXPECT_EQ(automatic->front().kind(), v1::CPU);
  for (size_t i = 1; i < automatic->size(); ++i) EXPECT_EQ((*automatic)[i].kind(), v1::GPU);
}

TEST(DiscoverDevicesTest, GpusThatAreNotThereAreAClearError) {
  DeviceRequest absent;
  absent.kind = DeviceRequest::Kind::kGpu;
  absent.gpus = {4096};
  absl::StatusOr<std::vector<v1::Device>> devices = DiscoverDevices(absent);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  // Without CUDA (or without a GPU) CUDA's reason; with GPUs, the ordinal named.
  EXPECT_THAT(devices.status().message(), HasSubstr("--devices asks for GPU"));
}

}  // namespace
}  // namespace tributary::worker
