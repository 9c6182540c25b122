#include "services/coordinator/shard_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::RegisterParameterServerRequest Shard(const std::string& address, int64_t index) {
  v1::RegisterParameterServerRequest request;
  request.set_address(address);
  request.set_shard_index(index);
  return request;
}

std::vector<uint32_t> Indices(const std::vector<v1::ShardInfo>& infos) {
  std::vector<uint32_t> indices;
  for (const v1::ShardInfo& info : infos) indices.push_back(info.shard_index());
  return indices;
}

TEST(ShardDirectoryTest, BadRequestsNameTheField) {
  ShardDirectory directory(2);
  EXPECT_THAT(directory.Register(Shard("", 0), kT0).status().message(), HasSubstr("address:"));
  EXPECT_THAT(directory.Register(Shard("a:1", -2), kT0).status().message(),
              HasSubstr("shard_index: must be >= 0, or -1"));
  EXPECT_THAT(directory.Register(Shard("a:1", 2), kT0).status().message(),
              HasSubstr("shard_index 2 is out of range: --ps_shards=2 expects shard indices 0..1"));
  EXPECT_THAT(directory.Register(Shard("a:1", INT32_MAX), kT0).status().message(),
              HasSubstr("out of range"));
  EXPECT_TRUE(directory.All().empty());
}

TEST(ShardDirectoryTest, AutomaticIndicesAreTheOwnThenAFreeOne) {
  ShardDirectory directory(2);
  EXPECT_EQ(directory.Register(Shard("a:1", -1), kT0)->shard_index, 0u);
  EXPECT_EQ(directory.Register(Shard("b:1", -1), kT0)->shard_index, 1u);
  absl::StatusOr<ShardDirectory::Registered> again = directory.Register(Shard("b:1", -1), kT0);
  EXPECT_EQ(again->shard_index, 1u);
  EXPECT_EQ(again->previous_address, "b:1");
  EXPECT_THAT(directory.Register(Shard("c:1", -1), kT0).status().message(),
              HasSubstr("all 2 shard indices are taken by live shards"));
  EXPECT_THAT(directory.Missing(), ElementsAre());
}

TEST(ShardDirectoryTest, AnUnreachableShardsIndexCanBeTaken) {
  ShardDirectory directory(1);
  ASSERT_TRUE(directory.Register(Shard("a:1", 0), kT0).ok());
  EXPECT_THAT(directory.Register(Shard("b:1", 0), kT0).status().message(),
              HasSubstr("shard_index 0 is taken by the live shard at a:1"));
  v1::ShardInfo a;
  a.set_shard_index(0);
  a.set_address("a:1");
  EXPECT_TRUE(directory.RecordPoll(a, absl::UnavailableError("connection refused"), ""));
  EXPECT_THAT(directory.Summaries()[0].error(), HasSubstr("connection refused"));
  EXPECT_THAT(directory.UnreachableNote(),
              HasSubstr("PS shard 0 at a:1 is not answering (connection refused)"));
  absl::StatusOr<ShardDirectory::Registered> taken = directory.Register(Shard("b:1", 0), kT0);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->previous_address, "a:1");
  // A poll of the shard that used to be there no longer counts.
  EXPECT_FALSE(directory.RecordPoll(a, v1::ShardStatus(), ""));
  v1::ShardInfo b;
  b.set_shard_index(0);
  b.set_address("b:1");
  EXPECT_TRUE(directory.RecordPoll(b, v1::ShardStatus(), ""));
  EXPECT_EQ(directory.UnreachableNote(), "") << "every polled shard answers";
}

TEST(ShardDirectoryTest, MapHoldsOnlyExpectedIndicesAndPollsFeedTheSummaries) {
  ShardDirectory directory(2);
  v1::ShardInfo old;
  old.set_shard_index(3);  // From a state file written with --ps_shards=4.
  old.set_address("old:1");
  directory.Restore(old, kT0);
  ASSERT_TRUE(directory.Register(Shard("a:1", 0), kT0).ok());
  EXPECT_THAT(Indices(directory.Map()), ElementsAre(0));
  EXPECT_THAT(Indices(directory.All()), ElementsAre(0, 3));
  EXPECT_THAT(directory.Missing(), ElementsAre(1));
  v1::ShardStatus status;
  status.set_job_id("job-1");
  status.set_bytes_in(100);
  status.set_bytes_out(300);
  status.set_step(9);
  ASSERT_TRUE(directory.RecordPoll(directory.Map()[0], status, "EndJob(x): refused"));
  const v1::ShardSummary summary = directory.Summaries()[0];
  EXPECT_TRUE(summary.reachable());
  EXPECT_EQ(summary.step(), 9u);
  EXPECT_EQ(summary.bytes_in(), 100u);
  EXPECT_EQ(summary.bytes_out(), 300u);
  EXPECT_EQ(summary.error(), "EndJob(x): refused");
}

}  // namespace
}  // namespace tributary::coordinator
