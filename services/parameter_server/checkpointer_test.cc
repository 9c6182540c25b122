#include "services/parameter_server/checkpointer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using ::testing::HasSubstr;

ShardCheckpoint Small(uint64_t step) {
  ShardCheckpoint checkpoint;
  checkpoint.meta.set_job_id("job-1");
  checkpoint.meta.set_shard_index(0);
  checkpoint.meta.set_step(step);
  PartitionCheckpoint* info = checkpoint.meta.add_partitions();
  info->set_id(0);
  info->set_length(2);
  info->set_state_slots(0);
  auto values = std::make_shared<v1::PartitionValues>();
  values->set_data(std::string(8, '\1'));
  PartitionData data;
  data.values = values;
  checkpoint.partitions.push_back(data);
  return checkpoint;
}

class CheckpointerTest : public ::testing::Test {
 protected:
  // What the shard's snapshot callback answers.
  std::optional<absl::StatusOr<Checkpointer::Pending>> Take(uint64_t step) {
    absl::MutexLock lock(&mu_);
    asked_.push_back(step);
    if (dir_.empty()) return std::nullopt;
    if (!error_.ok()) return absl::StatusOr<Checkpointer::Pending>(error_);
    return absl::StatusOr<Checkpointer::Pending>(Checkpointer::Pending{Small(step), dir_});
  }

  int Files() const {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/shard-0")) {
      files += entry.path().extension() == ".tpc";
    }
    return files;
  }

  absl::Mutex mu_;
  std::string dir_ = testing::FreshTempDir("checkpointer");
  absl::Status error_;
  std::vector<uint64_t> asked_;
  FakeClock clock_;
  prometheus::Registry registry_;
  ShardMetrics metrics_{registry_};
};

TEST_F(CheckpointerTest, WritesKeepsTheNewestAndRemembersTheLast) {
  Checkpointer checkpointer(2, metrics_, &clock_, [this](uint64_t step) { return Take(step); });
  EXPECT_EQ(checkpointer.last().age_seconds, -1);
  for (uint64_t step : {10, 20, 30}) {
    Checkpointer::Exclusive exclusive = checkpointer.Exclusively();
    absl::StatusOr<v1::CheckpointResponse> written = checkpointer.Write(exclusive, Small(step), dir_);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->step(), step);
    EXPECT_THAT(written->path(), HasSubstr("step-0000000000" + std::to_string(step)));
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(Files(), 2);
  EXPECT_EQ(metrics_.checkpoints_ok.Value(), 3);
  const Checkpointer::Last last = checkpointer.last();
  EXPECT_EQ(last.step, 30u);
  EXPECT_DOUBLE_EQ(last.age_seconds, 1.0);
  checkpointer.RefreshGauges();
  EXPECT_DOUBLE_EQ(metrics_.checkpoint_age_seconds.Value(), 1.0);
}

TEST_F(CheckpointerTest, NamesNeverRepeatWhenTheClockStandsStill) {
  Checkpointer checkpointer(5, metrics_, &clock_, [this](uint64_t step) { return Take(step); });
  Checkpointer::Exclusive exclusive = checkpointer.Exclusively();
  auto first = checkpointer.Write(exclusive, Small(7), dir_);
  auto second = checkpointer.Write(exclusive, Small(7), dir_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->path(), second->path());
}

TEST_F(CheckpointerTest, PeriodicRequestsAreWrittenOnTheWritersThread) {
  Checkpointer checkpointer(5, metrics_, &clock_, [this](uint64_t step) { return Take(step); });
  checkpointer.Request(100);
  checkpointer.Request(200);
  checkpointer.Flush();
  EXPECT_EQ(Files(), 2);
  EXPECT_EQ(checkpointer.last().step, 200u);
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(asked_, (std::vector<uint64_t>{100, 200}));
    error_ = absl::FailedPreconditionError("partition 3 has moved on");
  }
  checkpointer.Request(300);
  checkpointer.Flush();
  EXPECT_EQ(metrics_.checkpoints_error.Value(), 1);
  {
    absl::MutexLock lock(&mu_);
    dir_.clear();  // Nothing to write (no job, no directory): not an error.
  }
  checkpointer.Request(400);
  checkpointer.Flush();
  EXPECT_EQ(metrics_.checkpoints_error.Value(), 1);
}

TEST_F(CheckpointerTest, AFailedWriteIsCountedAndLeavesTheLastAlone) {
  Checkpointer checkpointer(5, metrics_, &clock_, [this](uint64_t step) { return Take(step); });
  Checkpointer::Exclusive exclusive = checkpointer.Exclusively();
  EXPECT_FALSE(checkpointer.Write(exclusive, Small(1), "/proc/no-such-dir").ok());
  EXPECT_EQ(metrics_.checkpoints_error.Value(), 1);
  EXPECT_EQ(checkpointer.last().path, "");
}

TEST_F(CheckpointerTest, ARestoredCheckpointIsTheLastOne) {
  Checkpointer checkpointer(5, metrics_, &clock_, [this](uint64_t step) { return Take(step); });
  CheckpointMeta meta;
  meta.set_step(42);
  meta.set_written_unix_micros(absl::ToUnixMicros(clock_.Now() - absl::Seconds(30)));
  checkpointer.Restored("/ckpt/shard-0/x.tpc", meta);
  EXPECT_EQ(checkpointer.restored_from(), "/ckpt/shard-0/x.tpc");
  EXPECT_EQ(checkpointer.last().step, 42u);
  EXPECT_DOUBLE_EQ(checkpointer.last().age_seconds, 30.0);
  EXPECT_DOUBLE_EQ(metrics_.checkpoint_age_seconds.Value(), 30.0);
  EXPECT_DOUBLE_EQ(metrics_.last_checkpoint_timestamp_seconds.Value(),
                   absl::ToUnixMicros(clock_.Now() - absl::Seconds(30)) / 1e6);
  checkpointer.FreshJob();
  EXPECT_EQ(metrics_.checkpoint_age_seconds.Value(), -1);
  EXPECT_EQ(metrics_.last_checkpoint_timestamp_seconds.Value(), 0);
  EXPECT_EQ(checkpointer.restored_from(), "");
  EXPECT_EQ(checkpointer.last().path, "");
  EXPECT_EQ(checkpointer.last().age_seconds, -1);
}

}  // namespace
}  // namespace tributary::ps
