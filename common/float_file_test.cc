#include "common/float_file.h"

#include <gtest/gtest.h>

#include <cstdio>
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

TEST(FloatFileTest, TheCacheKeepsAnUnchangedFileAndReadsARewrittenOneAgain) {
  const std::string path = Write("cached.f32", std::string(8, '\0'));
  CachedFloatFile cache;
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> first = cache.Read(path, 100);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(**first, std::vector<float>({0.0f, 0.0f}));
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> again = cache.Read(path, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first->get()) << "an unchanged file is not read again";
  // Rewritten under the same name with other values (and size): read again.
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  const std::string rewritten = path + ".new";
  std::ofstream(rewritten, std::ios::binary)
      << std::string(reinterpret_cast<const char*>(values.data()), 12);
  ASSERT_EQ(std::rename(rewritten.c_str(), path.c_str()), 0);
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> fresh = cache.Read(path, 100);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(**fresh, values);
  // Gone: the error, not the kept values.
  ASSERT_EQ(std::remove(path.c_str()), 0);
  EXPECT_EQ(cache.Read(path, 100).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tributary
