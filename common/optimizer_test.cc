#include "common/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tributary {
namespace {

v1::OptimizerSpec Spec(v1::OptimizerType type, float lr) {
  v1::OptimizerSpec spec;
  spec.set_type(type);
  spec.set_learning_rate(lr);
  spec.mutable_schedule()->set_kind(v1::CONSTANT);
  if (type == v1::ADAM || type == v1::ADAMW) {
    spec.set_beta1(0.9f);
    spec.set_beta2(0.999f);
    spec.set_epsilon(1e-8f);
  }
  return spec;
}

Optimizer Make(const v1::OptimizerSpec& spec, uint64_t total_steps = 100) {
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(spec, total_steps);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return *optimizer;
}

TEST(OptimizerTest, SgdWithAndWithoutWeightDecay) {
  v1::OptimizerSpec spec = Spec(v1::SGD, 0.1f);
  float p = 1.0f;
  const float g = 0.5f;
  Make(spec).Apply(0, &p, &g, nullptr, 1);
  EXPECT_FLOAT_EQ(p, 0.95f);
  spec.set_weight_decay(0.1f);
  p = 1.0f;
  Make(spec).Apply(0, &p, &g, nullptr, 1);
  EXPECT_FLOAT_EQ(p, 0.94f);  // 1 - 0.1 * (0.5 + 0.1 * 1)
}

TEST(OptimizerTest, MomentumAndNesterovByHand) {
  v1::OptimizerSpec spec = Spec(v1::MOMENTUM, 0.1f);
  spec.set_momentum(0.9f);
  Optimizer momentum = Make(spec);
  ASSERT_EQ(momentum.state_slots(), 1);
  float p = 1.0f, v = 0.0f;
  const float g = 0.5f;
  momentum.Apply(0, &p, &g, &v, 1);
  EXPECT_FLOAT_EQ(v, 0.5f);
  EXPECT_FLOAT_EQ(p, 0.95f);
  momentum.Apply(1, &p, &g, &v, 1);
  EXPECT_FLOAT_EQ(v, 0.95f);   // 0.9 * 0.5 + 0.5
  EXPECT_FLOAT_EQ(p, 0.855f);  // 0.95 - 0.1 * 0.95

  spec.set_nesterov(true);
  p = 1.0f;
  v = 0.0f;
  Make(spec).Apply(0, &p, &g, &v, 1);
  EXPECT_FLOAT_EQ(p, 0.905f);  // 1 - 0.1 * (0.5 + 0.9 * 0.5)
}

TEST(OptimizerTest, AdamAndAdamWByHand) {
  Optimizer adam = Make(Spec(v1::ADAM, 0.001f));
  ASSERT_EQ(adam.state_slots(), 2);
  float p = 1.0f;
  float state[2] = {0, 0};
  const float g = 0.5f;
  adam.Apply(0, &p, &g, state, 1);
  EXPECT_FLOAT_EQ(state[0], 0.05f);     // m = 0.1 * g
  EXPECT_NEAR(state[1], 0.00025f, 1e-8);  // v = (1 - beta2) * g^2, beta2 in float
  // m_hat = 0.5, v_hat = 0.25: p = 1 - 0.001 * 0.5 / (0.5 + 1e-8)
  EXPECT_NEAR(p, 0.999f, 1e-7);

  v1::OptimizerSpec spec = Spec(v1::ADAMW, 0.001f);
  spec.set_weight_decay(0.01f);
  p = 1.0f;
  state[0] = state[1] = 0;
  Make(spec).Apply(0, &p, &g, state, 1);
  EXPECT_NEAR(p, 1.0f - 0.001f * 0.01f - 0.001f, 1e-7);

  // Adam's L2 form adds wd * p to the gradient instead.
  spec = Spec(v1::ADAM, 0.001f);
  spec.set_weight_decay(0.01f);
  p = 1.0f;
  state[0] = state[1] = 0;
  Make(spec).Apply(0, &p, &g, state, 1);
  EXPECT_FLOAT_EQ(state[0], 0.1f * 0.51f);
}

TEST(OptimizerTest, Schedules) {
  v1::OptimizerSpec spec = Spec(v1::SGD, 1.0f);
  spec.mutable_schedule()->set_kind(v1::STEP);
  spec.mutable_schedule()->set_step_size(10);
  spec.mutable_schedule()->set_gamma(0.5f);
  Optimizer step = Make(spec);
  EXPECT_FLOAT_EQ(step.LearningRate(9), 1.0f);
  EXPECT_FLOAT_EQ(step.LearningRate(10), 0.5f);
  EXPECT_FLOAT_EQ(step.LearningRate(25), 0.25f);

  spec.mutable_schedule()->set_kind(v1::COSINE);
  spec.mutable_schedule()->set_min_lr(0.0f);
  Optimizer cosine = Make(spec, 100);
  EXPECT_FLOAT_EQ(cosine.LearningRate(0), 1.0f);
  EXPECT_NEAR(cosine.LearningRate(50), 0.5f, 1e-6);
  EXPECT_NEAR(cosine.LearningRate(100), 0.0f, 1e-6);
  EXPECT_NEAR(cosine.LearningRate(500), 0.0f, 1e-6);

  spec.mutable_schedule()->set_kind(v1::CONSTANT);
  spec.mutable_schedule()->set_warmup_steps(4);
  Optimizer warm = Make(spec);
  EXPECT_FLOAT_EQ(warm.LearningRate(0), 0.25f);
  EXPECT_FLOAT_EQ(warm.LearningRate(3), 1.0f);
  EXPECT_FLOAT_EQ(warm.LearningRate(4), 1.0f);
}

// What makes PS partitions and the single-process trainer agree: applying the update
// to ranges (with their own slot-major state) equals applying it to the whole buffer.
TEST(OptimizerTest, RangesGiveTheSameBitsAsTheWholeBuffer) {
  for (v1::OptimizerType type : {v1::SGD, v1::MOMENTUM, v1::ADAM, v1::ADAMW}) {
    v1::OptimizerSpec spec = Spec(type, 0.01f);
    spec.set_weight_decay(0.001f);
    if (type == v1::MOMENTUM) {
      spec.set_momentum(0.9f);
      spec.set_nesterov(true);
    }
    Optimizer optimizer = Make(spec);
    const size_t n = 1000;
    const int slots = optimizer.state_slots();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> whole(n), grad(n);
    for (size_t i = 0; i < n; ++i) {
      whole[i] = normal(rng);
      grad[i] = normal(rng);
    }
    std::vector<float> parts = whole;
    std::vector<float> whole_state(slots * n, 0.0f);
    const std::vector<size_t> cuts = {0, 333, 334, 1000};
    std::vector<std::vector<float>> part_states;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      part_states.emplace_back(slots * (cuts[c + 1] - cuts[c]), 0.0f);
    }
    for (uint64_t step = 0; step < 3; ++step) {
      optimizer.Apply(step, whole.data(), grad.data(), whole_state.data(), n);
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        optimizer.Apply(step, parts.data() + cuts[c], grad.data() + cuts[c],
                        part_states[c].data(), cuts[c + 1] - cuts[c]);
      }
    }
    EXPECT_EQ(whole, parts) << v1::OptimizerType_Name(type);
  }
}

TEST(OptimizerTest, ApplyMeanIsDivideThenApplyBitForBit) {
  for (v1::OptimizerType type : {v1::SGD, v1::MOMENTUM, v1::ADAM, v1::ADAMW}) {
    for (bool nesterov : {false, true}) {
      v1::OptimizerSpec spec = Spec(type, 0.03f);
      spec.set_weight_decay(0.002f);
      if (type == v1::MOMENTUM) {
        spec.set_momentum(0.9f);
        spec.set_nesterov(nesterov);
      }
      Optimizer optimizer = Make(spec);
      const size_t n = 1003;  // Not a multiple of the vector width.
      std::mt19937 rng(3);
      std::normal_distribution<float> normal;
      std::vector<float> params(n), sum(n);
      for (size_t i = 0; i < n; ++i) {
        params[i] = normal(rng);
        sum[i] = 37.0f * normal(rng);
      }
      const float samples = 37.0f;
      std::vector<float> reference = params, fused_out(n), in_place = params;
      std::vector<float> reference_state(optimizer.state_slots() * n, 0.0f);
      std::vector<float> fused_state = reference_state, in_place_state = reference_state;
      std::vector<float> fused_in = params;
      for (uint64_t step = 0; step < 4; ++step) {
        std::vector<float> mean(n);
        for (size_t i = 0; i < n; ++i) mean[i] = sum[i] / samples;
        optimizer.Apply(step, reference.data(), mean.data(), reference_state.data(), n);
        optimizer.ApplyMean(step, fused_in.data(), fused_out.data(), sum.data(), samples,
                            fused_state.data(), n);
        fused_in = fused_out;
        optimizer.ApplyMean(step, in_place.data(), in_place.data(), sum.data(), samples,
                            in_place_state.data(), n);
      }
      const std::string name = v1::OptimizerType_Name(type) + (nesterov ? " nesterov" : "");
      EXPECT_EQ(fused_out, reference) << name;
      EXPECT_EQ(in_place, reference) << name;
      EXPECT_EQ(fused_state, reference_state) << name;
      EXPECT_NE(reference, params) << name;
    }
  }
}

// The PS's last push added inside the optimizer's pass: the same as summing it into
// the gradient sum first, for every optimizer, with or without earlier pushes, at any
// alignment of the pushed bytes; a non-finite push or sum is reported.
TEST(OptimizerTest, ApplyMeanAddingIsSumThenApplyMeanBitForBit) {
  for (v1::OptimizerType type : {v1::SGD, v1::MOMENTUM, v1::ADAM, v1::ADAMW}) {
    for (bool earlier : {false, true}) {
      v1::OptimizerSpec spec = Spec(type, 0.03f);
      spec.set_weight_decay(0.002f);
      if (type == v1::MOMENTUM) spec.set_momentum(0.9f);
      Optimizer optimizer = Make(spec);
      const size_t n = 1003;
      std::mt19937 rng(5);
      std::normal_distribution<float> normal;
      std::vector<float> params(n), sum(n), last(n);
      for (size_t i = 0; i < n; ++i) {
        params[i] = normal(rng);
        sum[i] = earlier ? 20.0f * normal(rng) : 0.0f;
        last[i] = 17.0f * normal(rng);
      }
      std::string bytes(1 + 4 * n, '\0');  // Misaligned by one byte.
      std::memcpy(bytes.data() + 1, last.data(), 4 * n);
      std::vector<float> reference_out(n), fused_out(n);
      std::vector<float> reference_state(optimizer.state_slots() * n, 0.0f);
      std::vector<float> fused_state = reference_state;
      for (uint64_t step = 0; step < 3; ++step) {
        std::vector<float> total = sum;
        for (size_t i = 0; i < n; ++i) total[i] = earlier ? sum[i] + last[i] : last[i];
        optimizer.ApplyMean(step, params.data(), reference_out.data(), total.data(), 37.0f,
                            reference_state.data(), n);
        EXPECT_TRUE(optimizer.ApplyMeanAdding(step, params.data(), fused_out.data(),
                                              earlier ? sum.data() : nullptr, bytes.data() + 1,
                                              37.0f, fused_state.data(), n));
      }
      const std::string name = v1::OptimizerType_Name(type) + (earlier ? " after others" : "");
      EXPECT_EQ(fused_out, reference_out) << name;
      EXPECT_EQ(fused_state, reference_state) << name;
      EXPECT_NE(fused_out, params) << name;

      // A NaN in the push, and a sum that overflows, are both reported.
      std::vector<float> out(n), state(optimizer.state_slots() * n, 0.0f);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(bytes.data() + 1 + 4 * 500, &nan, 4);
      EXPECT_FALSE(optimizer.ApplyMeanAdding(0, params.data(), out.data(),
                                             earlier ? sum.data() : nullptr, bytes.data() + 1,
                                             37.0f, state.data(), n))
          << name;
      std::memcpy(bytes.data() + 1, last.data(), 4 * n);
      if (earlier) {
        std::vector<float> big(n, 3e38f);
        const float huge = 3e38f;
        std::memcpy(bytes.data() + 1 + 4 * 7, &huge, 4);
        EXPECT_FALSE(optimizer.ApplyMeanAdding(0, params.data(), out.data(), big.data(),
                                               bytes.data() + 1, 37.0f, state.data(), n))
            << name;
      }
    }
  }
}

// Every optimizer variant (SGD, momentum, Adam, AdamW, Nesterov), with weight decay.
std::vector<v1::OptimizerSpec> EveryVariant() {
  std::vector<v1::OptimizerSpec> specs;
  for (v1::OptimizerType type : {v1::SGD, v1::MOMENTUM, v1::ADAM, v1::ADAMW}) {
    v1::OptimizerSpec spec = Spec(type, 0.05f);
    spec.set_weight_decay(0.01f);
    if (type == v1::MOMENTUM) spec.set_momentum(0.9f);
    specs.push_back(spec);
  }
  v1::OptimizerSpec nesterov = specs[1];
  nesterov.set_nesterov(true);
  specs.push_back(nesterov);
  return specs;
}

// What the GPU replica's fused kernel runs (StepOf per element, gpu_kernels.cu): for
// every optimizer, bit for bit what ApplyMean computes on the host.
TEST(OptimizerTest, TheKernelsElementStepIsApplyMeanBitForBit) {
  const std::vector<v1::OptimizerSpec> specs = EveryVariant();
  constexpr size_t kN = 257;
  for (const v1::OptimizerSpec& spec : specs) {
    const Optimizer optimizer = Make(spec);
    SCOPED_TRACE(v1::OptimizerType_Name(spec.type()) + (spec.nesterov() ? " nesterov" : ""));
    std::vector<float> host(kN), device(kN), sum(kN);
    for (size_t i = 0; i < kN; ++i) {
      host[i] = device[i] = std::sin(static_cast<float>(i)) * 0.5f;
    }
    const size_t slots = static_cast<size_t>(optimizer.state_slots());
    std::vector<float> host_state(slots * kN, 0.0f), device_state(slots * kN, 0.0f);
    for (uint64_t step = 0; step < 5; ++step) {
      for (size_t i = 0; i < kN; ++i) sum[i] = std::cos(static_cast<float>(i * (step + 3))) * 7;
      optimizer.ApplyMean(step, host.data(), host.data(), sum.data(), 13.0f, host_state.data(), kN);
      const UpdateCoefficients c = optimizer.Coefficients(step);
      for (size_t i = 0; i < kN; ++i) {
        device[i] = StepOf(c, device[i], sum[i] / 13.0f, device_state.data(),
                           static_cast<long long>(i), static_cast<long long>(kN));
      }
      ASSERT_EQ(0, std::memcmp(host.data(), device.data(), kN * sizeof(float))) << "step " << step;
      ASSERT_EQ(host_state, device_state) << "step " << step;
    }
  }
}

// The PS keeps the state before each step (for a resume one step back) by swapping two
// buffers: reading the state from one and writing it to the other must give the bits
// of updating in place, and leave the one read from untouched.
TEST(OptimizerTest, StateReadFromAnotherBufferGivesTheInPlaceBits) {
  const std::vector<v1::OptimizerSpec> specs = EveryVariant();
  constexpr size_t kN = 131;
  for (const v1::OptimizerSpec& spec : specs) {
    const Optimizer optimizer = Make(spec);
    SCOPED_TRACE(v1::OptimizerType_Name(spec.type()) + (spec.nesterov() ? " nesterov" : ""));
    const size_t slots = static_cast<size_t>(optimizer.state_slots());
    std::vector<float> in_place(kN), swapped(kN), sum(kN), last_bytes(kN);
    for (size_t i = 0; i < kN; ++i) in_place[i] = swapped[i] = std::sin(0.3f * i);
    std::vector<float> state(slots * kN, 0.0f), current(slots * kN, 0.0f),
        previous(slots * kN, -7.0f);  // What the other buffer held: never read.
    for (uint64_t step = 0; step < 6; ++step) {
      for (size_t i = 0; i < kN; ++i) {
        sum[i] = std::cos(static_cast<float>(i * (step + 2))) * 3;
        last_bytes[i] = std::sin(static_cast<float>(i + step)) * 2;
      }
      const std::vector<float> before = current;
      previous.swap(current);  // As SyncAggregator::CompleteStep does.
      if (step % 2 == 0) {
        optimizer.ApplyMean(step, in_place.data(), in_place.data(), sum.data(), 3.0f,
                            state.data(), kN);
        optimizer.ApplyMean(step, swapped.data(), swapped.data(), sum.data(), 3.0f,
                            current.data(), kN, previous.data());
      } else {
        const char* last = reinterpret_cast<const char*>(last_bytes.data());
        ASSERT_TRUE(optimizer.ApplyMeanAdding(step, in_place.data(), in_place.data(),
                                              sum.data(), last, 3.0f, state.data(), kN));
        ASSERT_TRUE(optimizer.ApplyMeanAdding(step, swapped.data(), swapped.data(), sum.data(),
                                              last, 3.0f, current.data(), kN, previous.data()));
      }
      ASSERT_EQ(0, std::memcmp(in_place.data(), swapped.data(), kN * sizeof(float)))
          << "step " << step;
      ASSERT_EQ(0, std::memcmp(state.data(), current.data(), state.size() * sizeof(float)))
          << "step " << step;
      ASSERT_EQ(previous, before) << "the state read from is left as it was, step " << step;
    }
  }
}

TEST(OptimizerTest, BadSpecsNameTheField) {
  v1::OptimizerSpec spec = Spec(v1::SGD, 0.0f);
  absl::StatusOr<Optimizer> bad = Optimizer::Create(spec, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("optimizer.learning_rate"), std::string::npos);

  spec = Spec(v1::MOMENTUM, 0.1f);
  spec.set_momentum(1.5f);
  bad = Optimizer::Create(spec, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("optimizer.momentum"), std::string::npos);

  spec = Spec(v1::SGD, 0.1f);
  spec.mutable_schedule()->set_kind(v1::STEP);
  bad = Optimizer::Create(spec, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("schedule.step_size"), std::string::npos);

  spec = Spec(v1::SGD, NAN);
  EXPECT_FALSE(Optimizer::Create(spec, 10).ok());
}

}  // namespace
}  // namespace tributary
