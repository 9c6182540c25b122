#include "services/parameter_server/checkpoint_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

ShardCheckpoint MakeCheckpoint(uint64_t step, int64_t micros) {
  ShardCheckpoint checkpoint;
  checkpoint.meta.set_job_id("job-1");
  checkpoint.meta.set_shard_index(2);
  checkpoint.meta.set_step(step);
  checkpoint.meta.set_generation(3);
  checkpoint.meta.set_written_unix_micros(micros);
  for (uint32_t id : {4, 7}) {
    PartitionCheckpoint* info = checkpoint.meta.add_partitions();
    info->set_id(id);
    info->set_length(5);
    info->set_state_slots(2);
    info->set_version(step);
    auto values = std::make_shared<v1::PartitionValues>();
    std::string data(20, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(id * 31 + i + step);
    values->set_data(data);
    PartitionData partition;
    partition.values = values;
    for (int i = 0; i < 10; ++i) partition.state.push_back(0.5f * i + id);
    checkpoint.partitions.push_back(partition);
  }
  return checkpoint;
}

void Corrupt(const std::string& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte;
  file.get(byte);
  file.seekp(static_cast<std::streamoff>(offset));
  file.put(static_cast<char>(byte ^ 0x20));
}

TEST(CheckpointFileTest, RoundTripsBitForBit) {
  const std::string dir = testing::FreshTempDir("roundtrip");
  const ShardCheckpoint written = MakeCheckpoint(12, 1000);
  auto result = WriteCheckpoint(dir + "/shard-2", written);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->path, dir + "/shard-2/ckpt-0000000000001000-step-000000000012.tpc");
  EXPECT_EQ(result->bytes, fs::file_size(result->path));
  auto read = ReadCheckpoint(result->path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.job_id(), "job-1");
  EXPECT_EQ(read->meta.step(), 12u);
  ASSERT_EQ(read->partitions.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(read->partitions[i].values->data(), written.partitions[i].values->data());
    EXPECT_EQ(read->partitions[i].state, written.partitions[i].state);
    EXPECT_EQ(read->partitions[i].values->partition_id(), written.meta.partitions(i).id());
  }
  EXPECT_EQ(ShardsWithCheckpoints(dir), std::vector<uint32_t>{2});
  // No temp file is left behind.
  for (const auto& entry : fs::directory_iterator(dir + "/shard-2")) {
    EXPECT_FALSE(entry.path().filename().string().rfind(".", 0) == 0) << entry.path();
  }
}

TEST(CheckpointFileTest, DetectsCorruptionTruncationAndTornWrites) {
  const std::string dir = testing::FreshTempDir("corrupt");
  auto written = WriteCheckpoint(dir, MakeCheckpoint(1, 1));
  ASSERT_TRUE(written.ok());
  const std::string path = written->path;
  const uint64_t size = fs::file_size(path);

  const std::string flipped = dir + "/flipped.tpc";
  fs::copy_file(path, flipped);
  Corrupt(flipped, size - 30);  // Inside the optimizer state.
  EXPECT_THAT(ReadCheckpoint(flipped).status().message(), HasSubstr("checksum mismatch"));
  EXPECT_EQ(ReadCheckpoint(flipped).status().code(), absl::StatusCode::kDataLoss);

  const std::string torn = dir + "/torn.tpc";
  fs::copy_file(path, torn);
  fs::resize_file(torn, size - 40);
  EXPECT_THAT(ReadCheckpoint(torn).status().message(), HasSubstr("torn or truncated"));

  const std::string no_end = dir + "/noend.tpc";
  fs::copy_file(path, no_end);
  Corrupt(no_end, size - 2);
  EXPECT_THAT(ReadCheckpoint(no_end).status().message(), HasSubstr("end marker missing"));

  const std::string magic = dir + "/magic.tpc";
  fs::copy_file(path, magic);
  Corrupt(magic, 0);
  EXPECT_THAT(ReadCheckpoint(magic).status().message(), HasSubstr("bad magic"));

  std::ofstream(dir + "/tiny.tpc") << "TRB";
  EXPECT_THAT(ReadCheckpoint(dir + "/tiny.tpc").status().message(), HasSubstr("truncated"));
  EXPECT_EQ(ReadCheckpoint(dir + "/missing.tpc").status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointFileTest, LoadsTheNewestIntactFileAndPrunesOldOnes) {
  const std::string dir = testing::FreshTempDir("newest");
  std::vector<std::string> paths;
  for (int i = 1; i <= 4; ++i) {
    auto written = WriteCheckpoint(dir, MakeCheckpoint(10 * i, 100 * i));
    ASSERT_TRUE(written.ok());
    paths.push_back(written->path);
  }
  ASSERT_EQ(ListCheckpoints(dir).front(), paths[3]);
  Corrupt(paths[3], 100);
  fs::resize_file(paths[2], 50);
  std::ofstream(dir + "/.ckpt-0000000000000999-step-000000000099.tpc.tmp") << "partial";
  std::vector<std::string> skipped;
  std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir, &skipped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->path, paths[1]);
  EXPECT_EQ(loaded->checkpoint.meta.step(), 20u);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr(paths[3]));
  EXPECT_THAT(skipped[1], HasSubstr(paths[2]));
  EXPECT_FALSE(fs::exists(dir + "/.ckpt-0000000000000999-step-000000000099.tpc.tmp"));

  PruneCheckpoints(dir, 2);
  EXPECT_EQ(ListCheckpoints(dir), (std::vector<std::string>{paths[3], paths[2]}));
  EXPECT_FALSE(LoadNewestCheckpoint(dir, nullptr).has_value());
  EXPECT_FALSE(LoadNewestCheckpoint(dir + "/absent", nullptr).has_value());
}

TEST(CheckpointFileTest, RefusesDataThatDoesNotMatchTheMeta) {
  ShardCheckpoint checkpoint = MakeCheckpoint(1, 1);
  checkpoint.partitions[1].state.pop_back();
  EXPECT_THAT(WriteCheckpoint(testing::FreshTempDir("mismatch"), checkpoint).status().message(),
              HasSubstr("partition 7: data does not match length 5 with 2 state slots"));
}

}  // namespace
}  // namespace tributary::ps
