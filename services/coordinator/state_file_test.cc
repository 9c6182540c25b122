// The state file: round trip, the previous version kept, torn and corrupt files
// detected (and not silently used), fallback to the previous version.
#include "services/coordinator/state_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

CoordinatorState MakeState(uint64_t generation) {
  CoordinatorState state;
  state.set_format_version(1);
  state.set_next_job_number(3);
  state.set_last_generation(generation);
  v1::Job* job = state.add_jobs();
  job->set_job_id("job-2-abcd");
  job->set_state(v1::RUNNING);
  job->set_step(42);
  job->mutable_spec()->set_name("mnist");
  return state;
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::string dir_;
};

TEST_F(StateFileTest, FreshDirectoryHasNoState) {
  StateFile file(dir_);
  absl::StatusOr<std::optional<StateFile::Loaded>> loaded = file.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_value());
}

TEST_F(StateFileTest, RoundTripAndPreviousVersion) {
  StateFile file(dir_);
  ASSERT_TRUE(file.Save(MakeState(7)).ok());
  ASSERT_TRUE(file.Save(MakeState(8)).ok());
  auto loaded = file.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->state.last_generation(), 8u);
  EXPECT_EQ((*loaded)->state.jobs(0).job_id(), "job-2-abcd");
  EXPECT_EQ((*loaded)->state.jobs(0).step(), 42u);
  EXPECT_EQ((*loaded)->source, file.path());
  EXPECT_TRUE((*loaded)->problem.empty());
  auto previous = StateFile::Decode(file.previous_path(), ReadAll(file.previous_path()));
  ASSERT_TRUE(previous.ok()) << previous.status();
  EXPECT_EQ(previous->last_generation(), 7u);
  // The file is readable JSON behind one header line.
  EXPECT_THAT(ReadAll(file.path()), HasSubstr("\"jobId\": \"job-2-abcd\""));
}

TEST_F(StateFileTest, TornFileIsDetected) {
  absl::StatusOr<std::string> bytes = StateFile::Encode(MakeState(5));
  ASSERT_TRUE(bytes.ok());
  const std::string torn = bytes->substr(0, bytes->size() - 10);
  auto decoded = StateFile::Decode("x.json", torn);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("torn"));
  EXPECT_THAT(decoded.status().message(), HasSubstr("x.json"));
  auto headless = StateFile::Decode("x.json", "tributary-coordinator-st");
  EXPECT_EQ(headless.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(StateFileTest, FlippedByteIsDetected) {
  absl::StatusOr<std::string> bytes = StateFile::Encode(MakeState(5));
  ASSERT_TRUE(bytes.ok());
  std::string corrupt = *bytes;
  const size_t at = corrupt.find("42");
  ASSERT_NE(at, std::string::npos);
  corrupt[at] = '9';  // Still valid JSON, wrong checksum.
  auto decoded = StateFile::Decode("x.json", corrupt);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("CRC-32"));
}

TEST_F(StateFileTest, CorruptCurrentFallsBackToPreviousAndSaysSo) {
  StateFile file(dir_);
  ASSERT_TRUE(file.Save(MakeState(7)).ok());
  ASSERT_TRUE(file.Save(MakeState(8)).ok());
  const std::string current = ReadAll(file.path());
  WriteAll(file.path(), current.substr(0, current.size() / 2));  // Torn.
  auto loaded = file.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->state.last_generation(), 7u);
  EXPECT_EQ((*loaded)->source, file.previous_path());
  EXPECT_THAT((*loaded)->problem, HasSubstr("torn"));
  EXPECT_THAT((*loaded)->problem, HasSubstr("previous version"));
  // The bad file is kept aside for inspection, not overwritten.
  EXPECT_FALSE(ReadAll(file.path() + ".corrupt").empty());
}

TEST_F(StateFileTest, BothCorruptIsAnError) {
  StateFile file(dir_);
  ASSERT_TRUE(file.Save(MakeState(7)).ok());
  ASSERT_TRUE(file.Save(MakeState(8)).ok());
  WriteAll(file.path(), "garbage");
  WriteAll(file.previous_path(), "garbage too");
  auto loaded = file.Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr(file.path()));
  EXPECT_THAT(loaded.status().message(), HasSubstr(file.previous_path()));
}

TEST_F(StateFileTest, CorruptWithoutPreviousIsAnError) {
  StateFile file(dir_);
  ASSERT_TRUE(file.Save(MakeState(7)).ok());
  WriteAll(file.path(), ReadAll(file.path()) + "x");
  auto loaded = file.Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr("no previous version"));
}

TEST_F(StateFileTest, UnwritableDirectoryIsAnError) {
  StateFile file("/proc/no-such-dir/state");
  const absl::Status saved = file.Save(MakeState(1));
  EXPECT_FALSE(saved.ok());
  EXPECT_THAT(saved.message(), HasSubstr("/proc/no-such-dir/state"));
}

}  // namespace
}  // namespace tributary::coordinator
