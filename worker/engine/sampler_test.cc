#include "worker/engine/sampler.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace tributary::engine {
namespace {

v1::JobSpec Spec(uint32_t batch, uint64_t seed) {
  v1::JobSpec spec;
  spec.set_global_batch_size(batch);
  spec.set_seed(seed);
  return WithDefaults(spec);
}

TEST(SamplerTest, EpochPermutationsAreSeededPermutations) {
  Sampler a(Spec(8, 1), 100), b(Spec(8, 1), 100), c(Spec(8, 2), 100);
  std::vector<uint64_t> e0 = a.Permutation(0);
  std::vector<uint64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(e0, identity);
  EXPECT_EQ(e0, b.Permutation(0));
  EXPECT_NE(e0, a.Permutation(1));
  EXPECT_NE(e0, c.Permutation(0));
}

TEST(SamplerTest, EpochCoversEverySampleOnceWithAShortLastBatch) {
  Sampler sampler(Spec(32, 5), 100);
  EXPECT_EQ(sampler.steps_per_epoch(), 4u);
  std::vector<uint64_t> seen;
  for (uint64_t step = 4; step < 8; ++step) {  // Epoch 1.
    EXPECT_EQ(sampler.EpochOf(step), 1u);
    std::vector<uint64_t> batch = sampler.GlobalBatch(step);
    EXPECT_EQ(batch.size(), step == 7 ? 4u : 32u);
    EXPECT_EQ(batch.size(), sampler.BatchSize(step));
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<uint64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(seen, identity);
}

TEST(SamplerTest, ReplicaSlicesTileTheGlobalBatchForAnyWorldSize) {
  Sampler sampler(Spec(10, 3), 57);
  for (uint64_t step : {0u, 3u, 5u, 6u}) {  // 5 is the short last batch (7 samples).
    const std::vector<uint64_t> global = sampler.GlobalBatch(step);
    for (uint32_t world = 1; world <= 12; ++world) {
      std::vector<uint64_t> joined;
      for (uint32_t r = 0; r < world; ++r) {
        std::vector<uint64_t> part = sampler.ReplicaSamples(step, world, r);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, global) << "step " << step << " world " << world;
    }
    // A node's range of replicas is the concatenation of its replicas' slices.
    std::vector<uint64_t> node = sampler.ReplicaSamples(step, 4, 1, 2);
    std::vector<uint64_t> r1 = sampler.ReplicaSamples(step, 4, 1);
    std::vector<uint64_t> r2 = sampler.ReplicaSamples(step, 4, 2);
    r1.insert(r1.end(), r2.begin(), r2.end());
    EXPECT_EQ(node, r1);
  }
  // Remainder to the first replicas: 10 over 4 is 3, 3, 2, 2.
  EXPECT_EQ(sampler.ReplicaSamples(0, 4, 0).size(), 3u);
  EXPECT_EQ(sampler.ReplicaSamples(0, 4, 3).size(), 2u);
}

}  // namespace
}  // namespace tributary::engine
