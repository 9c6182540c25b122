#include "common/partition_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary {
namespace {

using ::testing::HasSubstr;

// Tensors of the given lengths, named t0, t1, ..., laid out back to back.
v1::ParameterLayout Layout(const std::vector<int64_t>& lengths) {
  v1::ParameterLayout layout;
  int64_t offset = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    v1::TensorView* tensor = layout.add_tensors();
    tensor->set_name("t" + std::to_string(i));
    tensor->add_shape(lengths[i]);
    tensor->set_offset(offset);
    tensor->set_length(lengths[i]);
    offset += lengths[i];
  }
  layout.set_total_elements(offset);
  return layout;
}

v1::PartitionPlan MustPlan(const v1::ParameterLayout& layout, int64_t bytes, uint32_t shards,
                           v1::PartitionCut cut = v1::CUT_EVEN) {
  absl::StatusOr<v1::PartitionPlan> plan = MakePartitionPlan(layout, bytes, shards, cut);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : v1::PartitionPlan();
}

TEST(PartitionPlanTest, CutsEvenlyAcrossTensorBoundaries) {
  // 1000 elements, at most 64 per partition (256 bytes) -> 16 partitions of 62 or 63.
  const v1::PartitionPlan plan = MustPlan(Layout({300, 10, 690}), 256, 1);
  ASSERT_EQ(plan.partitions_size(), 16);
  int64_t offset = 0;
  for (const v1::Partition& partition : plan.partitions()) {
    EXPECT_EQ(partition.offset(), offset);
    EXPECT_TRUE(partition.length() == 62 || partition.length() == 63) << partition.length();
    EXPECT_LE(partition.length() * 4, 256);
    EXPECT_EQ(partition.shard(), 0u);
    offset += partition.length();
  }
  EXPECT_EQ(offset, 1000);
  EXPECT_EQ(plan.total_elements(), 1000);
  EXPECT_EQ(plan.partitions(0).length(), 63);   // 1000 = 16 * 62 + 8: the first 8 are longer.
  EXPECT_EQ(plan.partitions(15).length(), 62);
  EXPECT_TRUE(ValidatePartitionPlan(plan).ok());
}

// Lengths of the plan's partitions, in order.
std::vector<int64_t> Lengths(const v1::PartitionPlan& plan) {
  std::vector<int64_t> lengths;
  for (const v1::Partition& partition : plan.partitions()) lengths.push_back(partition.length());
  return lengths;
}

// The default job's MLP 784-256-128-10: PyTorch's shapes, weight then bias per layer.
v1::ParameterLayout MlpLayout() {
  v1::ParameterLayout layout;
  const std::vector<std::vector<int64_t>> shapes = {{256, 784}, {256}, {128, 256},
                                                    {128},      {10, 128}, {10}};
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    v1::TensorView* tensor = layout.add_tensors();
    tensor->set_name("t" + std::to_string(i));
    int64_t length = 1;
    for (int64_t dim : shapes[i]) {
      tensor->add_shape(dim);
      length *= dim;
    }
    tensor->set_offset(offset);
    tensor->set_length(length);
    offset += length;
  }
  layout.set_total_elements(offset);
  return layout;
}

TEST(PartitionPlanTest, TheLayerCutFollowsTheLayersAndTheEnginesRowPieces) {
  // The first layer's weight in its 8 row pieces of 32 rows (25,088 floats), the last
  // one with the first layer's bias; the second layer's weight (two pieces of 16,384,
  // grouped: 128 KiB); the rest grouped. 4 MiB would hold the whole model.
  const v1::PartitionPlan plan = MustPlan(MlpLayout(), 4 << 20, 2, v1::CUT_LAYERS);
  EXPECT_THAT(Lengths(plan), ::testing::ElementsAre(25088, 25088, 25088, 25088, 25088, 25088,
                                                    25088, 25088 + 256, 32768, 128 + 1280 + 10));
  for (int k = 0; k < 8; ++k) EXPECT_EQ(plan.partitions(k).offset(), k * 25088);
  // Neighbours alternate between the shards, so both work on the first layer at once.
  std::vector<uint32_t> shards;
  for (const v1::Partition& partition : plan.partitions()) shards.push_back(partition.shard());
  EXPECT_THAT(shards, ::testing::ElementsAre(0, 1, 0, 1, 0, 1, 0, 1, 0, 1));
  EXPECT_TRUE(ValidatePartitionPlan(plan).ok());
  // One shard: the same cut.
  EXPECT_EQ(Lengths(MustPlan(MlpLayout(), 4 << 20, 1, v1::CUT_LAYERS)), Lengths(plan));
}

TEST(PartitionPlanTest, TheLayerCutCutsLongUnitsIntoNearlyEqualPartsThatFit) {
  // At most 64 elements per partition (256 bytes): 300 -> 5 x 60, 10 alone (it does
  // not fit beside a full neighbour), 690 -> 11 parts of 63 or 62.
  const v1::PartitionPlan plan = MustPlan(Layout({300, 10, 690}), 256, 1, v1::CUT_LAYERS);
  EXPECT_THAT(Lengths(plan), ::testing::ElementsAre(60, 60, 60, 60, 60, 10, 63, 63, 63, 63, 63,
                                                    63, 63, 63, 62, 62, 62));
  int64_t offset = 0;
  for (const v1::Partition& partition : plan.partitions()) {
    EXPECT_EQ(partition.offset(), offset);
    EXPECT_LE(partition.length() * 4, 256);
    EXPECT_EQ(partition.shard(), 0u);
    offset += partition.length();
  }
  EXPECT_EQ(offset, 1000);
  EXPECT_EQ(plan.total_elements(), 1000);
  EXPECT_TRUE(ValidatePartitionPlan(plan).ok());
}

TEST(PartitionPlanTest, TheLayerCutGroupsSmallTensorsUpTo128KiB) {
  EXPECT_THAT(Lengths(MustPlan(Layout({100, 200, 30000, 5000}), 4 << 20, 1, v1::CUT_LAYERS)),
              ::testing::ElementsAre(30300, 5000));
  // partition_bytes below 128 KiB groups up to partition_bytes.
  EXPECT_THAT(Lengths(MustPlan(Layout({100, 200, 300, 50}), 1600, 1, v1::CUT_LAYERS)),
              ::testing::ElementsAre(300, 350));
}

TEST(PartitionPlanTest, NeitherCutGivesMorePartitionsThanTheBoundAShardChecks) {
  // Layouts of many shapes and sizes: the cut stays within MostParameterPartitions.
  uint64_t state = 12345;
  auto next = [&](uint64_t range) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + (state >> 33) % range;
  };
  for (int round = 0; round < 300; ++round) {
    v1::ParameterLayout layout;
    int64_t offset = 0;
    const int tensors = static_cast<int>(next(12));
    for (int t = 0; t < tensors; ++t) {
      v1::TensorView* tensor = layout.add_tensors();
      tensor->set_name("t" + std::to_string(t));
      const int64_t rows = static_cast<int64_t>(next(round % 2 == 0 ? 4 : 600));
      const int64_t cols = static_cast<int64_t>(next(round % 3 == 0 ? 3 : 3000));
      tensor->add_shape(rows);
      tensor->add_shape(cols);
      tensor->set_offset(offset);
      tensor->set_length(rows * cols);
      offset += rows * cols;
    }
    layout.set_total_elements(offset);
    const int64_t bytes = 4 * static_cast<int64_t>(next(round % 4 == 0 ? 100 : 200000));
    const uint32_t shards = static_cast<uint32_t>(next(5));
    for (v1::PartitionCut cut : {v1::CUT_EVEN, v1::CUT_LAYERS}) {
      const v1::PartitionPlan plan = MustPlan(layout, bytes, shards, cut);
      ASSERT_LE(static_cast<uint64_t>(plan.partitions_size()),
                MostParameterPartitions(static_cast<uint64_t>(offset), bytes, shards))
          << "round " << round << ", cut " << cut;
      ASSERT_TRUE(ValidatePartitionPlan(plan).ok()) << "round " << round;
      ASSERT_GE(plan.partitions_size(), static_cast<int>(std::min<int64_t>(shards, offset)));
    }
  }
  EXPECT_EQ(MostParameterPartitions(64, 256, 1), 3u);
  EXPECT_EQ(MostParameterPartitions(3, 4 << 20, 5), 3u);
  EXPECT_EQ(MostParameterPartitions(100, 0, 1), 0u);
}

TEST(PartitionPlanTest, TheCutsDifferInTheirPlansAndAnUnknownCutIsRefused) {
  const v1::PartitionPlan even = MustPlan(MlpLayout(), 4 << 20, 2, v1::CUT_EVEN);
  EXPECT_THAT(Lengths(even), ::testing::ElementsAre(117573, 117573));
  EXPECT_NE(even.fingerprint(), MustPlan(MlpLayout(), 4 << 20, 2, v1::CUT_LAYERS).fingerprint());
  // A spec stored before the cut existed names none: the even cut, the same plan.
  EXPECT_EQ(MustPlan(MlpLayout(), 4 << 20, 2, v1::PARTITION_CUT_UNSPECIFIED).fingerprint(),
            even.fingerprint());
  const absl::StatusOr<v1::PartitionPlan> bad =
      MakePartitionPlan(MlpLayout(), 4 << 20, 2, static_cast<v1::PartitionCut>(7));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("partition cut must be CUT_EVEN or CUT_LAYERS, got 7"));
  // CUT_AUTO names no plan: the coordinator resolves it first.
  const absl::StatusOr<v1::PartitionPlan> unresolved =
      MakePartitionPlan(MlpLayout(), 4 << 20, 2, v1::CUT_AUTO);
  EXPECT_EQ(unresolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unresolved.status().message(), HasSubstr("CUT_AUTO is not a cut yet"));
  // The layer cut's digest is pinned like the even one's (checkpoints are checked
  // against it).
  EXPECT_EQ(MustPlan(Layout({300, 10, 690}), 256, 1, v1::CUT_LAYERS).fingerprint(),
            "8c2d2dec62a52865411970f39ddb910a");
}

TEST(PartitionPlanTest, BalancesBytesAcrossShards) {
  const v1::PartitionPlan plan = MustPlan(Layout({4096, 4096, 1000, 17}), 1024, 3);
  int64_t most = 0, least = INT64_MAX;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    most = std::max(most, BytesOfShard(plan, shard));
    least = std::min(least, BytesOfShard(plan, shard));
  }
  // Greedy placement of near-equal partitions: shards differ by at most one partition.
  EXPECT_LE(most - least, 1024);
  EXPECT_EQ(BytesOfShard(plan, 0) + BytesOfShard(plan, 1) + BytesOfShard(plan, 2),
            plan.total_elements() * 4);
  std::vector<uint32_t> all;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    for (uint32_t id : PartitionsOfShard(plan, shard)) all.push_back(id);
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(plan.partitions_size()));
}

TEST(PartitionPlanTest, EveryShardGetsAPartitionOfASmallModel) {
  // 7850 floats fit one 4 MiB partition, but two shards should both work.
  const v1::PartitionPlan plan = MustPlan(Layout({7840, 10}), 4 << 20, 2);
  ASSERT_EQ(plan.partitions_size(), 2);
  EXPECT_EQ(plan.partitions(0).shard(), 0u);
  EXPECT_EQ(plan.partitions(1).shard(), 1u);
  EXPECT_EQ(plan.partitions(0).length(), 3925);
  // More shards than elements: every element still has exactly one home.
  const v1::PartitionPlan tiny = MustPlan(Layout({3}), 4 << 20, 5);
  EXPECT_EQ(tiny.partitions_size(), 3);
  EXPECT_TRUE(PartitionsOfShard(tiny, 4).empty());
}

TEST(PartitionPlanTest, IsAPureFunctionWithAStableFingerprint) {
  const v1::ParameterLayout layout = Layout({500, 20});
  const v1::PartitionPlan a = MustPlan(layout, 400, 2);
  const v1::PartitionPlan b = MustPlan(layout, 400, 2);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(a.fingerprint().size(), 32u);

  // Anything that changes the plan or the layout's names/shapes changes the digest.
  EXPECT_NE(MustPlan(layout, 800, 2).fingerprint(), a.fingerprint());
  EXPECT_NE(MustPlan(layout, 400, 3).fingerprint(), a.fingerprint());
  v1::ParameterLayout renamed = layout;
  renamed.mutable_tensors(1)->set_name("bias");
  EXPECT_NE(MustPlan(renamed, 400, 2).fingerprint(), a.fingerprint());
  v1::ParameterLayout reshaped = layout;
  reshaped.mutable_tensors(0)->clear_shape();
  reshaped.mutable_tensors(0)->add_shape(20);
  reshaped.mutable_tensors(0)->add_shape(25);
  EXPECT_NE(MustPlan(reshaped, 400, 2).fingerprint(), a.fingerprint());
}

TEST(PartitionPlanTest, RejectsBadLayouts) {
  v1::ParameterLayout gap = Layout({10, 10});
  gap.mutable_tensors(1)->set_offset(11);
  EXPECT_THAT(MakePartitionPlan(gap, 256, 1).status().message(),
              HasSubstr("tensor 1 't1': offset must be 10"));

  v1::ParameterLayout bad_shape = Layout({10});
  bad_shape.mutable_tensors(0)->add_shape(3);
  EXPECT_THAT(ValidateParameterLayout(bad_shape).message(),
              HasSubstr("shape [10,3] does not hold length 10"));

  v1::ParameterLayout twice = Layout({4, 4});
  twice.mutable_tensors(1)->set_name("t0");
  EXPECT_THAT(ValidateParameterLayout(twice).message(), HasSubstr("name used twice"));

  v1::ParameterLayout total = Layout({4});
  total.set_total_elements(5);
  EXPECT_THAT(ValidateParameterLayout(total).message(), HasSubstr("got 5"));

  EXPECT_THAT(ValidateParameterLayout(v1::ParameterLayout()).message(), HasSubstr("no tensors"));
  v1::ParameterLayout huge_dims = Layout({6});
  huge_dims.mutable_tensors(0)->clear_shape();
  huge_dims.mutable_tensors(0)->add_shape(INT64_MAX);
  huge_dims.mutable_tensors(0)->add_shape(INT64_MAX);
  EXPECT_FALSE(ValidateParameterLayout(huge_dims).ok());
}

TEST(PartitionPlanTest, RejectsBadSizesAndShardCounts) {
  const v1::ParameterLayout layout = Layout({10});
  EXPECT_THAT(MakePartitionPlan(layout, 6, 1).status().message(),
              HasSubstr("positive multiple of 4, got 6"));
  EXPECT_THAT(MakePartitionPlan(layout, 0, 1).status().message(), HasSubstr("got 0"));
  EXPECT_THAT(MakePartitionPlan(layout, 256, 0).status().message(),
              HasSubstr("num_shards must be > 0"));
}

TEST(PartitionPlanTest, ValidatePlanNamesTheBadPartition) {
  v1::PartitionPlan plan = MustPlan(Layout({100}), 64, 2);
  ASSERT_TRUE(ValidatePartitionPlan(plan).ok());

  v1::PartitionPlan overlong = plan;
  overlong.mutable_partitions(2)->set_length(17);
  EXPECT_THAT(ValidatePartitionPlan(overlong).message(),
              HasSubstr("partition 2: length must be in [1, 16], got 17"));

  v1::PartitionPlan bad_shard = plan;
  bad_shard.mutable_partitions(1)->set_shard(2);
  EXPECT_THAT(ValidatePartitionPlan(bad_shard).message(),
              HasSubstr("partition 1: shard must be < 2, got 2"));

  v1::PartitionPlan short_cover = plan;
  short_cover.set_total_elements(101);
  EXPECT_THAT(ValidatePartitionPlan(short_cover).message(), HasSubstr("cover 100 elements"));

  v1::PartitionPlan unnamed = plan;
  unnamed.clear_fingerprint();
  EXPECT_FALSE(ValidatePartitionPlan(unnamed).ok());
}


v1::ParameterLayout WithBuffers(const std::vector<int64_t>& lengths, size_t first_buffer) {
  v1::ParameterLayout layout = Layout(lengths);
  for (size_t i = first_buffer; i < lengths.size(); ++i) layout.mutable_tensors(i)->set_buffer(true);
  return layout;
}

TEST(PartitionPlanTest, BuffersGetPartitionsOfTheirOwnAfterTheParameters) {
  // 1000 trained elements, then buffers of 5 + 3: 16 parameter partitions, one buffer
  // partition holding exactly the 8 buffer elements.
  const v1::PartitionPlan plan = MustPlan(WithBuffers({300, 10, 690, 5, 3}, 3), 256, 2);
  ASSERT_EQ(plan.partitions_size(), 17);
  for (int i = 0; i < 16; ++i) EXPECT_FALSE(plan.partitions(i).buffers()) << i;
  const v1::Partition& buffers = plan.partitions(16);
  EXPECT_TRUE(buffers.buffers());
  EXPECT_EQ(buffers.offset(), 1000);
  EXPECT_EQ(buffers.length(), 8);
  EXPECT_EQ(plan.total_elements(), 1008);
  EXPECT_TRUE(ValidatePartitionPlan(plan).ok());
  // A large buffer region is cut by partition_bytes like the parameters.
  const v1::PartitionPlan big = MustPlan(WithBuffers({100, 200}, 1), 256, 1);
  ASSERT_EQ(big.partitions_size(), 2 + 4);  // 100 -> 2 of 50; 200 -> 4 of 50.
  EXPECT_FALSE(big.partitions(1).buffers());
  EXPECT_TRUE(big.partitions(2).buffers());
  EXPECT_EQ(big.partitions(2).offset(), 100);
}

TEST(PartitionPlanTest, BufferFlagsEnterTheFingerprintOnlyWhenPresent) {
  const v1::PartitionPlan plain = MustPlan(Layout({300, 8}), 256, 1);
  const v1::PartitionPlan buffered = MustPlan(WithBuffers({300, 8}, 1), 256, 1);
  EXPECT_NE(plain.fingerprint(), buffered.fingerprint());
  // Plans without buffers keep the fingerprint they had before buffers existed.
  // (This digest was computed before TensorView.buffer existed.)
  EXPECT_EQ(MustPlan(Layout({300, 10, 690}), 256, 1).fingerprint(), "73c713a4cf05fde74e79e66e5d4db5f8");
}

TEST(PartitionPlanTest, RefusesBuffersBeforeParametersOrFirst) {
  v1::ParameterLayout first = WithBuffers({4, 4}, 0);
  EXPECT_THAT(ValidateParameterLayout(first).message(), HasSubstr("must start with a trained"));
  v1::ParameterLayout mixed = Layout({4, 4, 4});
  mixed.mutable_tensors(1)->set_buffer(true);
  EXPECT_THAT(ValidateParameterLayout(mixed).message(),
              HasSubstr("tensor 2 't2': trained tensors must come before buffers"));
  v1::PartitionPlan plan = MustPlan(WithBuffers({300, 8}, 1), 256, 1);
  plan.mutable_partitions(0)->set_buffers(true);
  plan.mutable_partitions(1)->set_buffers(false);
  EXPECT_THAT(ValidatePartitionPlan(plan).message(),
              HasSubstr("buffer partitions must follow every parameter partition"));
}

}  // namespace
}  // namespace tributary
