#include "common/float_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace tributary {
namespace {

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(FloatFileTest, ReadsWholeFloatsWithinTheBound) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  const std::string path =
      Write("three.f32", std::string(reinterpret_cast<const char*>(values.data()), 12));
  absl::StatusOr<std::vector<float>> read = ReadFloatFile(path, 12);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, values);
  // One byte under the file's size: refused before reading, naming path and sizes.
  absl::StatusOr<std::vector<float>> too_big = ReadFloatFile(path, 11);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("12 bytes, more than the 11 allowed"),
            std::string::npos);
}

TEST(FloatFileTest, RefusesPartialFloatsMissingFilesAndDirectories) {
  const std::string path = Write("ragged.f32", std::string(6, 'x'));
  absl::StatusOr<std::vector<float>> ragged = ReadFloatFile(path, 100);
  EXPECT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ragged.status().message().find("6 bytes is not a whole number of float32"),
            std::string::npos);
  EXPECT_EQ(ReadFloatFile(::testing::TempDir() + "/absent.f32", 100).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadFloatFile(::testing::TempDir(), 100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tributary
