#include "worker/engine/parallel_runner.h"

#include <atomic>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/test_util.h"

namespace tributary::engine {
namespace {

TEST(ParallelRunnerTest, RunsEveryTaskOnceRunAfterRun) {
  for (int threads : {1, 2, 4}) {
    ParallelRunner runner(threads);
    EXPECT_EQ(runner.threads(), threads);
    for (int round = 0; round < 200; ++round) {
      const int tasks = 1 + round % 9;
      std::vector<std::atomic<int>> calls(tasks);
      runner.Run(tasks, [&](int i) { calls[i].fetch_add(1); });
      for (int i = 0; i < tasks; ++i) ASSERT_EQ(calls[i].load(), 1) << "round " << round;
    }
    runner.Run(0, [](int) { FAIL() << "no task to run"; });
  }
}

// The executor's products split over helpers give the single-thread gradients.
TEST(ParallelRunnerTest, SplitProductsMatchOneThread) {
  v1::ModelSpec spec;
  spec.set_name("cnn");
  for (uint32_t s : {64, 10}) spec.add_layer_sizes(s);
  for (uint32_t s : {16, 32}) spec.add_conv_channels(s);
  for (uint32_t s : {1, 28, 28}) spec.add_input_shape(s);
  const ModelDef model = *BuildModel(spec);
  const testing::OwnedBatch batch = testing::RandomBatch(model, 32, 2);
  std::vector<float> params(model.num_parameters);
  InitParameters(model, 5, params.data());
  std::vector<float> one(model.num_parameters), three(model.num_parameters);
  SetCpuMatmulThreads(1);
  CpuExecutor<float> serial(model);
  SetCpuMatmulThreads(3);
  CpuExecutor<float> parallel(model);
  SetCpuMatmulThreads(1);
  const DropoutKey key{1, 1};
  const LossStats a = serial.ForwardBackward(params.data(), batch.View(), &key, one.data(), {});
  const LossStats b = parallel.ForwardBackward(params.data(), batch.View(), &key, three.data(), {});
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-4);
  for (size_t j = 0; j < one.size(); ++j) {
    ASSERT_NEAR(one[j], three[j], 1e-5 + 1e-5 * std::abs(one[j])) << "element " << j;
  }
}

}  // namespace
}  // namespace tributary::engine
