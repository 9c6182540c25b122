#include "worker/comm/parallel_sum.h"

#include <random>

#include <gtest/gtest.h>

namespace tributary::worker {
namespace {

// The sum must be exactly the sequential sum in source order, whatever the threads.
TEST(ParallelSumTest, EqualsTheSequentialSumBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int64_t length : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    std::vector<std::vector<float>> buffers(3, std::vector<float>(length));
    for (auto& buffer : buffers) {
      for (float& x : buffer) x = normal(rng);
    }
    std::vector<float> expected(length);
    for (int64_t i = 0; i < length; ++i) {
      expected[i] = buffers[0][i];
      expected[i] += buffers[1][i];
      expected[i] += buffers[2][i];
    }
    for (int threads : {1, 2, 3, 8}) {
      ParallelSum sum(threads);
      std::vector<float> out(length, -1.0f);
      sum.Sum({buffers[0].data(), buffers[1].data(), buffers[2].data()}, length, out.data());
      EXPECT_EQ(out, expected) << length << " elements, " << threads << " threads";
      // Reusable.
      sum.Sum({buffers[2].data()}, length, out.data());
      EXPECT_EQ(out, buffers[2]);
    }
  }
}

}  // namespace
}  // namespace tributary::worker
