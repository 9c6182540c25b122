#include "services/parameter_server/sink_table.h"

#include <gtest/gtest.h>

#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using testing::RecordingSink;

std::shared_ptr<const v1::PartitionValues> Values(uint32_t id, size_t bytes) {
  auto values = std::make_shared<v1::PartitionValues>();
  values->set_partition_id(id);
  values->mutable_data()->assign(bytes, '\0');
  return values;
}

class SinkTableTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  ShardMetrics metrics_{registry_};
  SinkTable table_{metrics_};
  RecordingSink a_, b_;
};

TEST_F(SinkTableTest, EveryNodesLatestSinkGetsTheValuesAndTheBytesAreCounted) {
  table_.Reset(3);
  table_.Register(0, &a_);
  table_.Register(1, &b_);
  table_.Register(2, nullptr);  // Ignored.
  table_.DeliverToAll(Values(4, 100));
  EXPECT_EQ(a_.delivered().size(), 1u);
  EXPECT_EQ(b_.delivered().size(), 1u);
  EXPECT_EQ(metrics_.bytes_out.Value(), 200);
  // The latest stream of a node wins.
  table_.Register(1, &a_);
  table_.DeliverToAll(Values(4, 10));
  EXPECT_EQ(a_.delivered().size(), 3u);
  EXPECT_EQ(b_.delivered().size(), 1u);
  table_.DeliverTo(nullptr, Values(4, 10));
  EXPECT_EQ(metrics_.bytes_out.Value(), 220);
}

TEST_F(SinkTableTest, NodesOutsideTheGenerationAreIgnored) {
  table_.Reset(1);
  table_.Register(5, &a_);
  table_.DeliverToAll(Values(0, 8));
  EXPECT_TRUE(a_.delivered().empty());
}

TEST_F(SinkTableTest, EndAllEndsEachSinkOnceAndForgetsThem) {
  table_.Reset(3);
  table_.Register(0, &a_);
  table_.Register(1, &a_);  // One stream serving two ranks ends once.
  table_.Register(2, &b_);
  table_.EndAll(absl::FailedPreconditionError("generation 2 began"));
  EXPECT_EQ(a_.ended_count(), 1);
  EXPECT_EQ(b_.ended_count(), 1);
  EXPECT_EQ(a_.ended().message(), "generation 2 began");
  table_.DeliverToAll(Values(0, 8));
  EXPECT_TRUE(a_.delivered().empty());
}

TEST_F(SinkTableTest, DetachedSinksGetNothing) {
  table_.Reset(2);
  table_.Register(0, &a_);
  table_.Register(1, &b_);
  table_.Detach(&a_);
  table_.DeliverToAll(Values(0, 8));
  EXPECT_TRUE(a_.delivered().empty());
  EXPECT_EQ(b_.delivered().size(), 1u);
  table_.EndAll(absl::CancelledError("job ended"));
  EXPECT_EQ(a_.ended_count(), 0);
}

}  // namespace
}  // namespace tributary::ps
