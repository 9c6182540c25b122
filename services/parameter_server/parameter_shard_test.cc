// Over 600 lines on purpose: the shard's whole RPC contract against one fixture; the
// aggregators, sink table and checkpointer have their own tests.
#include "services/parameter_server/parameter_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using ::testing::ElementsAre;
using testing::FloatsOf;
using ::testing::HasSubstr;
using testing::InitialValues;
using testing::MakeHeader;
using testing::MakePush;
using testing::MakeSpec;
using testing::RecordingSink;
using testing::Sgd;

constexpr int64_t kElements = 128;  // Two partitions of 64 floats (256 bytes).

std::vector<float> Filled(int64_t n, float value) { return std::vector<float>(n, value); }

std::vector<float> Ramp(int64_t n, float start, float step) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// A shard with the job installed.
struct Fixture {
  Fixture(const v1::JobSpec& spec, std::vector<float> initial, uint32_t shards = 1,
          uint32_t shard = 0, ShardOptions options = {})
      : shard_options(options),
        shard(options, nullptr),
        header(MakeHeader(spec, kElements, shards, shard)),
        initial(std::move(initial)) {
    absl::StatusOr<v1::InitPartitionsResponse> init =
        this->shard.Init(header, InitialValues(header, this->initial));
    EXPECT_TRUE(init.ok()) << init.status();
    EXPECT_TRUE(init.ok() && init->created());
  }

  absl::StatusOr<PushResult> Push(uint64_t step, uint32_t node, uint32_t partition,
                                  const std::vector<float>& grad, uint64_t samples,
                                  RecordingSink* sink, uint64_t generation = 0,
                                  v1::DType dtype = v1::FLOAT32) {
    return shard.Push(MakePush(header, generation, step, node, partition, grad, samples, dtype),
                      sink);
  }

  std::vector<float> Values(uint32_t partition) {
    v1::PullRequest request;
    request.set_job_id(header.job_id());
    request.add_partition_ids(partition);
    auto values = shard.Pull(request);
    EXPECT_TRUE(values.ok()) << values.status();
    return FloatsOf(*(*values)[0]);
  }

  std::shared_ptr<const v1::PartitionValues> Raw(uint32_t partition) {
    v1::PullRequest request;
    request.set_job_id(header.job_id());
    request.add_partition_ids(partition);
    return (*shard.Pull(request))[0];
  }

  ShardOptions shard_options;
  ParameterShard shard;
  v1::InitHeader header;
  std::vector<float> initial;
};

void ExpectOk(const absl::StatusOr<PushResult>& result, PushResult expected) {
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, expected);
}

TEST(ParameterShardSyncTest, SumsEveryNodeDividesBySamplesAndAppliesSgd) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(0.1f), 3), Ramp(kElements, 1.0f, 0.01f));
  const std::vector<std::vector<float>> grads = {Ramp(kElements, 0.5f, 0.125f),
                                                 Ramp(kElements, 1.0f, -0.25f),
                                                 Ramp(kElements, -2.0f, 0.0625f)};
  const std::vector<uint64_t> samples = {2, 3, 5};
  RecordingSink sinks[3];

  // Partition 0: nodes arrive 2, 0, 1. Nothing is published before the last one.
  ExpectOk(f.Push(0, 2, 0, grads[2], samples[2], &sinks[2]), PushResult::kAccepted);
  ExpectOk(f.Push(0, 0, 0, grads[0], samples[0], &sinks[0]), PushResult::kAccepted);
  EXPECT_TRUE(sinks[0].delivered().empty());
  v1::ShardStatus status = f.shard.Status();
  EXPECT_THAT(status.partitions(0).waiting_for(), ElementsAre(1));
  EXPECT_THAT(status.partitions(1).waiting_for(), ElementsAre(0, 1, 2));
  ExpectOk(f.Push(0, 1, 0, grads[1], samples[1], &sinks[1]), PushResult::kAccepted);

  // Hand-computed full-batch SGD: p - lr * (g2 + g0 + g1) / (2 + 3 + 5).
  for (int k = 0; k < 3; ++k) {
    auto values = sinks[k].Last(0);
    ASSERT_NE(values, nullptr) << "node " << k;
    EXPECT_EQ(values->step(), 1u);
    EXPECT_EQ(values->version(), 1u);
    const std::vector<float> got = FloatsOf(*values);
    for (int i = 0; i < 64; ++i) {
      const float mean = (grads[2][i] + grads[0][i] + grads[1][i]) / 10.0f;
      EXPECT_FLOAT_EQ(got[i], f.initial[i] - 0.1f * mean) << "element " << i;
    }
  }
  // Partition 1 completes on its own, later.
  EXPECT_EQ(sinks[0].Last(1), nullptr);
  EXPECT_EQ(f.shard.Status().step(), 0u);
  for (uint32_t node : {1, 0, 2}) {
    ExpectOk(f.Push(0, node, 1, grads[node], samples[node], &sinks[node]), PushResult::kAccepted);
  }
  const std::vector<float> got = FloatsOf(*sinks[2].Last(1));
  for (int i = 64; i < 128; ++i) {
    const float mean = (grads[1][i] + grads[0][i] + grads[2][i]) / 10.0f;
    EXPECT_FLOAT_EQ(got[i - 64], f.initial[i] - 0.1f * mean) << "element " << i;
  }
  status = f.shard.Status();
  EXPECT_EQ(status.step(), 1u);
  EXPECT_EQ(status.pushes_accepted(), 6u);
  EXPECT_EQ(status.updates_applied(), 2u);
  EXPECT_EQ(status.bytes_in(), 6u * 256);
  EXPECT_EQ(status.bytes_out(), 6u * 256);  // Two partitions to three nodes.
}

TEST(ParameterShardSyncTest, PartitionsCompleteOutOfOrderAndIndependently) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(0.5f), 2), Filled(kElements, 1.0f));
  RecordingSink a, b;
  const std::vector<float> grad = Filled(kElements, 1.0f);
  // Node 0 sends partition 1 first, node 1 partition 1 then 0: partition 1 is done
  // while partition 0 still waits for node 1.
  ExpectOk(f.Push(0, 0, 1, grad, 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 1, grad, 1, &b), PushResult::kAccepted);
  ExpectOk(f.Push(0, 0, 0, grad, 1, &a), PushResult::kAccepted);
  ASSERT_NE(a.Last(1), nullptr);
  EXPECT_EQ(a.Last(0), nullptr);
  v1::ShardStatus status = f.shard.Status();
  EXPECT_EQ(status.partitions(1).step(), 1u);
  EXPECT_EQ(status.partitions(0).step(), 0u);
  EXPECT_THAT(status.partitions(0).waiting_for(), ElementsAre(1));
  EXPECT_EQ(status.step(), 0u);
  ExpectOk(f.Push(0, 1, 0, grad, 1, &b), PushResult::kAccepted);
  EXPECT_EQ(f.shard.Status().step(), 1u);
  EXPECT_FLOAT_EQ(FloatsOf(*b.Last(0))[0], 0.5f);  // 1 - 0.5 * (2 / 2)
}

// Two nodes push 0.4 and 0.6 with one sample each: mean gradient 0.5 per step.
std::vector<float> TwoSyncSteps(v1::OptimizerSpec optimizer, uint64_t total_steps = 100) {
  v1::JobSpec spec = MakeSpec(v1::SYNC, std::move(optimizer), 2);
  ParameterShard shard(ShardOptions{}, nullptr);
  const v1::InitHeader header = MakeHeader(spec, 64, 1, 0, "job-1", total_steps);
  EXPECT_TRUE(shard.Init(header, InitialValues(header, Filled(64, 1.0f))).ok());
  RecordingSink sink;
  std::vector<float> after;
  for (uint64_t step = 0; step < 2; ++step) {
    EXPECT_TRUE(shard.Push(MakePush(header, 0, step, 0, 0, Filled(64, 0.4f), 1), &sink).ok());
    EXPECT_TRUE(shard.Push(MakePush(header, 0, step, 1, 0, Filled(64, 0.6f), 1), &sink).ok());
    after.push_back(FloatsOf(*sink.Last(0))[0]);
  }
  return after;
}

TEST(ParameterShardSyncTest, OptimizersMatchHandComputedValues) {
  // SGD with weight decay: 1 - 0.1 * (0.5 + 0.1 * 1).
  v1::OptimizerSpec sgd = Sgd(0.1f);
  sgd.set_weight_decay(0.1f);
  EXPECT_FLOAT_EQ(TwoSyncSteps(sgd)[0], 0.94f);

  v1::OptimizerSpec momentum = Sgd(0.1f);
  momentum.set_type(v1::MOMENTUM);
  momentum.set_momentum(0.9f);
  EXPECT_THAT(TwoSyncSteps(momentum),
              ElementsAre(::testing::FloatEq(0.95f), ::testing::FloatEq(0.855f)));
  momentum.set_nesterov(true);  // v = 0.5; p = 1 - 0.1 * (0.5 + 0.9 * 0.5)
  EXPECT_FLOAT_EQ(TwoSyncSteps(momentum)[0], 0.905f);

  v1::OptimizerSpec adam;
  adam.set_type(v1::ADAM);
  adam.set_learning_rate(0.001f);
  // Bias-corrected moments are 0.5 and 0.25 at both steps: each step moves by lr.
  // A wrong step index (no bias correction at step 1) would move by ~0.0016 instead.
  EXPECT_THAT(TwoSyncSteps(adam), ElementsAre(::testing::FloatNear(0.999f, 1e-6f),
                                              ::testing::FloatNear(0.998f, 1e-6f)));
  adam.set_type(v1::ADAMW);
  adam.set_weight_decay(0.1f);  // 1 - 0.001 * 0.1 * 1, then - 0.001.
  EXPECT_NEAR(TwoSyncSteps(adam)[0], 0.9989f, 1e-6f);

  // The schedule is indexed by the step being completed.
  v1::OptimizerSpec step_decay = Sgd(0.1f);
  step_decay.mutable_schedule()->set_kind(v1::STEP);
  step_decay.mutable_schedule()->set_step_size(1);
  step_decay.mutable_schedule()->set_gamma(0.5f);
  EXPECT_THAT(TwoSyncSteps(step_decay),
              ElementsAre(::testing::FloatEq(0.95f), ::testing::FloatEq(0.925f)));
  v1::OptimizerSpec warmup = Sgd(0.1f);
  warmup.mutable_schedule()->set_warmup_steps(2);
  EXPECT_THAT(TwoSyncSteps(warmup),
              ElementsAre(::testing::FloatEq(0.975f), ::testing::FloatEq(0.925f)));
  v1::OptimizerSpec cosine = Sgd(0.1f);
  cosine.mutable_schedule()->set_kind(v1::COSINE);  // total 2 steps: lr 0.1, then 0.05.
  EXPECT_THAT(TwoSyncSteps(cosine, 2),
              ElementsAre(::testing::FloatEq(0.95f), ::testing::FloatEq(0.925f)));
}

TEST(ParameterShardSyncTest, ExactDuplicatesAreNotAppliedTwiceAndDoneStepsAreResent) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(1.0f), 2), Filled(kElements, 0.0f));
  RecordingSink a, b;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &a), PushResult::kDuplicate);
  EXPECT_THAT(f.shard.Status().partitions(0).waiting_for(), ElementsAre(1));
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 3.0f), 1, &b), PushResult::kAccepted);
  EXPECT_FLOAT_EQ(FloatsOf(*a.Last(0))[0], -2.0f);  // -(1 + 3) / 2, node 0 counted once.
  const size_t before = a.delivered().size();
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &a), PushResult::kDuplicate);
  ASSERT_EQ(a.delivered().size(), before + 1);  // Re-sent to the pusher only.
  EXPECT_EQ(a.delivered().back()->step(), 1u);
  EXPECT_EQ(b.delivered().size(), 1u);
  const v1::ShardStatus status = f.shard.Status();
  EXPECT_EQ(status.pushes_duplicate(), 2u);
  EXPECT_EQ(status.pushes_accepted(), 2u);
  EXPECT_EQ(status.updates_applied(), 1u);
}

TEST(ParameterShardSyncTest, NonFiniteGradientSkipsTheUpdateButTheStepGoesOn) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink a, b;
  std::vector<float> poisoned = Filled(kElements, 1.0f);
  poisoned[5] = std::nanf("");  // In partition 0 only.
  ExpectOk(f.Push(0, 0, 0, poisoned, 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 1.0f), 1, &b), PushResult::kAccepted);
  auto skipped = a.Last(0);
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ(skipped->step(), 1u);     // The step completed...
  EXPECT_EQ(skipped->version(), 0u);  // ...without an update.
  EXPECT_EQ(FloatsOf(*skipped), Filled(64, 1.0f));
  // The other partition of the same step is unaffected.
  ExpectOk(f.Push(0, 0, 1, poisoned, 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 1, Filled(kElements, 1.0f), 1, &b), PushResult::kAccepted);
  EXPECT_FLOAT_EQ(FloatsOf(*a.Last(1))[0], 0.9f);

  // A sum that overflows to Inf is caught too.
  const std::vector<float> huge = Filled(kElements, 3e38f);
  ExpectOk(f.Push(1, 0, 0, huge, 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(1, 1, 0, huge, 1, &b), PushResult::kAccepted);
  EXPECT_EQ(a.Last(0)->version(), 0u);
  EXPECT_EQ(a.Last(0)->step(), 2u);

  // A literal infinity in a push (either sign) is caught like a NaN.
  std::vector<float> infinite = Filled(kElements, 1.0f);
  infinite[7] = std::numeric_limits<float>::infinity();
  infinite[9] = -std::numeric_limits<float>::infinity();
  ExpectOk(f.Push(2, 0, 0, Filled(kElements, 1.0f), 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(2, 1, 0, infinite, 1, &b), PushResult::kAccepted);
  EXPECT_EQ(a.Last(0)->version(), 0u);
  EXPECT_EQ(a.Last(0)->step(), 3u);
  EXPECT_EQ(FloatsOf(*a.Last(0)), Filled(64, 1.0f));

  // Training goes on: the next finite step applies.
  ExpectOk(f.Push(3, 0, 0, Filled(kElements, 1.0f), 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(3, 1, 0, Filled(kElements, 1.0f), 1, &b), PushResult::kAccepted);
  EXPECT_EQ(a.Last(0)->version(), 1u);
  EXPECT_FLOAT_EQ(FloatsOf(*a.Last(0))[0], 0.9f);
  const v1::ShardStatus status = f.shard.Status();
  EXPECT_EQ(status.updates_skipped_non_finite(), 3u);
  EXPECT_EQ(status.partitions(0).skipped_non_finite(), 3u);
  EXPECT_EQ(status.partitions(1).skipped_non_finite(), 0u);
  EXPECT_EQ(f.shard.metrics().updates_skipped_non_finite.Value(), 3);
}

TEST(ParameterShardSyncTest, NarrowWireDtypesAreWidenedBeforeSumming) {
  for (v1::DType dtype : {v1::FLOAT16, v1::BFLOAT16}) {
    v1::JobSpec spec = MakeSpec(v1::SYNC, Sgd(1.0f), 2);
    spec.set_wire_dtype(dtype);
    Fixture f(spec, Filled(kElements, 0.0f));
    RecordingSink a;
    // 0.75 + 0.25 * i is exact in both narrow types for small i; sums exceed their
    // precision only in float32, where they are exact again.
    ExpectOk(f.Push(0, 0, 0, Ramp(kElements, 0.75f, 0.25f), 1, &a, 0, dtype),
             PushResult::kAccepted);
    ExpectOk(f.Push(0, 1, 0, Ramp(kElements, 1.25f, 0.25f), 3, &a, 0, dtype),
             PushResult::kAccepted);
    const std::vector<float> got = FloatsOf(*a.Last(0));
    for (int i = 0; i < 64; ++i) {
      EXPECT_FLOAT_EQ(got[i], -(2.0f + 0.5f * i) / 4.0f) << v1::DType_Name(dtype) << " " << i;
    }
    // A float32 push to a narrow-wire job is refused.
    auto wrong = f.Push(0, 0, 1, Filled(kElements, 1.0f), 1, &a, 0, v1::FLOAT32);
    EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(wrong.status().message(), HasSubstr("wire dtype is"));
  }
}

// The shard says which cut its plan was made with (the coordinator gives a CUT_AUTO
// job that cut); a plan named by no cut is refused.
TEST(ParameterShardTest, TheStatusNamesThePlansCutAndAnUnresolvedCutIsRefused) {
  v1::JobSpec spec = MakeSpec(v1::SYNC, Sgd(0.1f), 1);
  spec.set_partition_cut(v1::CUT_AUTO);
  ParameterShard shard(ShardOptions{}, nullptr);
  const v1::InitHeader automatic = MakeHeader(spec, kElements, 1, 0);
  absl::StatusOr<v1::InitPartitionsResponse> init =
      shard.Init(automatic, InitialValues(automatic, Filled(kElements, 1.0f)));
  EXPECT_EQ(init.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(init.status().message(), HasSubstr("job.partition_cut: CUT_AUTO names no plan"));
  EXPECT_EQ(shard.Status().job_id(), "");
  EXPECT_EQ(shard.Status().partition_cut(), v1::PARTITION_CUT_UNSPECIFIED);

  spec.set_partition_cut(v1::CUT_LAYERS);
  const v1::InitHeader layers = MakeHeader(spec, kElements, 1, 0);
  init = shard.Init(layers, InitialValues(layers, Filled(kElements, 1.0f)));
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_EQ(shard.Status().partition_cut(), v1::CUT_LAYERS);
}

TEST(ParameterShardSyncTest, EveryRejectionHasItsStatusAndCounterAndChangesNothing) {
  ParameterShard empty(ShardOptions{}, nullptr);
  const v1::JobSpec spec = MakeSpec(v1::SYNC, Sgd(1.0f), 2);
  const v1::InitHeader header = MakeHeader(spec, kElements, 2, 0);
  auto no_job = empty.Push(MakePush(header, 0, 0, 0, 0, Filled(kElements, 1.0f), 1), nullptr);
  EXPECT_EQ(no_job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_job.status().message(), HasSubstr("holds no job"));

  Fixture f(spec, Filled(kElements, 0.0f), /*shards=*/2, /*shard=*/0);
  RecordingSink sink;
  auto expect = [&](v1::GradientPush push, absl::StatusCode code, const std::string& text,
                    RejectReason reason) {
    const double before = f.shard.metrics().Rejected(reason).Value();
    auto result = f.shard.Push(push, &sink);
    EXPECT_EQ(result.status().code(), code) << text << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr(text));
    EXPECT_EQ(f.shard.metrics().Rejected(reason).Value(), before + 1) << text;
  };
  const std::vector<float> ones = Filled(kElements, 1.0f);
  auto good = [&](uint64_t generation = 0, uint64_t step = 0, uint32_t node = 0) {
    return MakePush(f.header, generation, step, node, 0, ones, 1);
  };
  v1::GradientPush push = good();
  push.set_job_id("job-2");
  expect(push, absl::StatusCode::kFailedPrecondition, "holds job 'job-1'", RejectReason::kWrongJob);
  push = good();
  push.set_partition_id(7);
  expect(push, absl::StatusCode::kInvalidArgument, "partition 7 is not owned by shard 0",
         RejectReason::kUnknownPartition);
  push = MakePush(f.header, 0, 0, 0, 1, ones, 1);  // Owned by shard 1.
  expect(push, absl::StatusCode::kInvalidArgument, "partition 1 is not owned",
         RejectReason::kUnknownPartition);
  push = good();
  push.set_dtype(v1::BFLOAT16);
  expect(push, absl::StatusCode::kInvalidArgument, "dtype BFLOAT16", RejectReason::kWrongDtype);
  push = good();
  push.mutable_data()->resize(252);
  expect(push, absl::StatusCode::kInvalidArgument,
         "partition 0 of step 0: expected 64 elements (256 bytes of FLOAT32), got 252 bytes",
         RejectReason::kWrongLength);
  push = good();
  push.set_sample_count(0);
  expect(push, absl::StatusCode::kInvalidArgument, "sample_count 0 with a non-zero gradient",
         RejectReason::kZeroSamples);
  expect(good(0, 0, 2), absl::StatusCode::kInvalidArgument,
         "node_rank 2 is not in generation 0 of 2 nodes", RejectReason::kBadNodeRank);
  expect(good(0, 1), absl::StatusCode::kFailedPrecondition,
         "step 1 for partition 0 from node 0 is ahead: the partition is at step 0",
         RejectReason::kStepAhead);
  expect(good(3), absl::StatusCode::kUnavailable, "generation 3 has not begun",
         RejectReason::kFutureGeneration);

  // Nothing above touched the partition: a clean step gives the exact result.
  ExpectOk(f.shard.Push(good(), &sink), PushResult::kAccepted);
  ExpectOk(f.shard.Push(good(0, 0, 1), &sink), PushResult::kAccepted);
  EXPECT_EQ(FloatsOf(*sink.Last(0)), Filled(64, -1.0f));

  v1::BeginGenerationRequest generation;
  generation.set_job_id("job-1");
  generation.set_generation(1);
  generation.set_num_nodes(2);
  generation.set_resume_step(1);
  ASSERT_TRUE(f.shard.BeginGeneration(generation).ok());
  expect(good(0, 1), absl::StatusCode::kFailedPrecondition,
         "stale generation 0 from node 0: the current generation is 1",
         RejectReason::kStaleGeneration);
  expect(good(1, 0), absl::StatusCode::kFailedPrecondition,
         "stale step 0 for partition 0 from node 0: generation 1 began at step 1",
         RejectReason::kStaleStep);
  const v1::ShardStatus status = f.shard.Status();
  EXPECT_EQ(status.pushes_rejected(), 11u);
  EXPECT_EQ(status.partitions(0).version(), 1u);
}

TEST(ParameterShardSyncTest, SampleCountsAreBoundedSoTheirSumCannotWrap) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(1.0f), 2), Filled(kElements, 0.0f));
  RecordingSink sink;
  const std::vector<float> grad = Filled(kElements, 3.0f * kMaxSamplesPerPush);
  // 2^64-1 + 2 would wrap to 1: an update 1e19 times too large.
  auto huge = f.shard.Push(MakePush(f.header, 0, 0, 0, 0, grad, UINT64_MAX), &sink);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.status().message(),
              HasSubstr("sample_count 18446744073709551615 is above the limit of 1099511627776"));
  EXPECT_EQ(f.shard.metrics().Rejected(RejectReason::kTooManySamples).Value(), 1);
  // At the limit on every node: the mean is exact.
  ExpectOk(f.shard.Push(MakePush(f.header, 0, 0, 0, 0, grad, kMaxSamplesPerPush), &sink),
           PushResult::kAccepted);
  ExpectOk(f.shard.Push(MakePush(f.header, 0, 0, 1, 0, grad, kMaxSamplesPerPush), &sink),
           PushResult::kAccepted);
  EXPECT_EQ(FloatsOf(*sink.Last(0)), Filled(64, -3.0f));
}

TEST(ParameterShardGenerationTest, NewGenerationDiscardsPartialAggregatesAndEndsOldStreams) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(1.0f), 2), Filled(kElements, 0.0f));
  RecordingSink old_stream, a, b;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 100.0f), 1, &old_stream), PushResult::kAccepted);

  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(1);
  request.set_num_nodes(3);
  request.set_resume_step(0);
  auto begun = f.shard.BeginGeneration(request);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->discarded(), 1u);
  EXPECT_EQ(begun->rolled_back(), 0u);
  EXPECT_EQ(begun->step(), 0u);
  EXPECT_EQ(old_stream.ended().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old_stream.ended().message(), HasSubstr("generation 1 began"));

  // The three nodes of generation 1 redo step 0; node 0's old push is gone.
  RecordingSink c;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &a, 1), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 2.0f), 1, &b, 1), PushResult::kAccepted);
  ExpectOk(f.Push(0, 2, 0, Filled(kElements, 3.0f), 1, &c, 1), PushResult::kAccepted);
  EXPECT_EQ(FloatsOf(*c.Last(0)), Filled(64, -2.0f));
  EXPECT_TRUE(old_stream.delivered().empty());

  request.set_generation(1);
  auto again = f.shard.BeginGeneration(request);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("not newer than shard 0's current generation 1"));
  request.set_job_id("job-9");
  request.set_generation(5);
  EXPECT_EQ(f.shard.BeginGeneration(request).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterShardGenerationTest, PartitionsAheadRollBackWithTheirOptimizerState) {
  v1::OptimizerSpec momentum = Sgd(0.1f);
  momentum.set_type(v1::MOMENTUM);
  momentum.set_momentum(0.9f);
  Fixture f(MakeSpec(v1::SYNC, momentum, 1), Filled(kElements, 1.0f));
  RecordingSink sink;
  const std::vector<float> grad = Ramp(kElements, 0.5f, 0.01f);
  // Step 0 and 1 of partition 0 complete; partition 1 completes step 0 only: the node
  // died in the middle of step 1.
  ExpectOk(f.Push(0, 0, 0, grad, 1, &sink), PushResult::kAccepted);
  ExpectOk(f.Push(0, 0, 1, grad, 1, &sink), PushResult::kAccepted);
  const std::vector<float> after_step0 = f.Values(0);
  ExpectOk(f.Push(1, 0, 0, grad, 1, &sink), PushResult::kAccepted);
  const std::vector<float> after_step1 = f.Values(0);
  ASSERT_EQ(f.shard.Status().partitions(0).step(), 2u);

  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(1);
  request.set_num_nodes(1);
  request.set_resume_step(3);
  auto unreachable = f.shard.BeginGeneration(request);
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unreachable.status().message(),
              HasSubstr("resume_step 3 cannot be reached: partition 0 of shard 0 is at step 2"));

  request.set_resume_step(1);
  auto begun = f.shard.BeginGeneration(request);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->rolled_back(), 1u);
  auto rolled = f.Raw(0);
  EXPECT_EQ(rolled->step(), 1u);
  EXPECT_EQ(rolled->version(), 1u);
  EXPECT_EQ(FloatsOf(*rolled), after_step0);
  EXPECT_EQ(f.shard.Status().step(), 1u);

  // Redoing step 1 gives bit for bit the same values: the velocity was rolled back too.
  ExpectOk(f.Push(1, 0, 0, grad, 1, &sink, 1), PushResult::kAccepted);
  EXPECT_EQ(f.Values(0), after_step1);

  // Only one step is kept: going back two is refused.
  request.set_generation(2);
  request.set_resume_step(0);
  EXPECT_EQ(f.shard.BeginGeneration(request).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A fence ends the old generation where each partition stands: its partial
// aggregates go, its streams end, its pushes are refused, and the partitions keep
// their steps; the coordinator's BeginGeneration of the same generation then brings
// them to the common resume step (here one back).
TEST(ParameterShardGenerationTest, AFenceStopsTheOldGenerationWhereItStands) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(0.1f), 1), Filled(kElements, 1.0f));
  RecordingSink old_stream;
  const std::vector<float> grad = Ramp(kElements, 0.5f, 0.01f);
  ExpectOk(f.Push(0, 0, 0, grad, 1, &old_stream), PushResult::kAccepted);  // p0: step 1
  const std::vector<float> after_step0 = f.Values(0);
  v1::BeginGenerationRequest fence;
  fence.set_job_id("job-1");
  fence.set_generation(4);
  fence.set_num_nodes(1);
  fence.set_resume_step(99);  // Ignored by a fence.
  fence.set_fence(true);
  auto fenced = f.shard.BeginGeneration(fence);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  EXPECT_EQ(fenced->step(), 0u) << "the lowest partition step";
  EXPECT_EQ(fenced->rolled_back(), 0u);
  EXPECT_EQ(f.Raw(0)->step(), 1u) << "partition 0 keeps its step";
  EXPECT_EQ(f.Raw(1)->step(), 0u);
  EXPECT_EQ(old_stream.ended().code(), absl::StatusCode::kFailedPrecondition);
  // The old generation's pushes are refused from now on.
  RecordingSink late;
  EXPECT_EQ(f.Push(0, 0, 1, grad, 1, &late).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.Raw(1)->step(), 0u);

  // The same generation, begun for real at the common step: partition 0 rolls back.
  v1::BeginGenerationRequest begin = fence;
  begin.set_fence(false);
  begin.set_resume_step(0);
  auto begun = f.shard.BeginGeneration(begin);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->rolled_back(), 1u);
  EXPECT_EQ(f.Raw(0)->step(), 0u);
  EXPECT_EQ(f.shard.Status().generation(), 4u);
  // Once begun for real, the generation is not begun again.
  EXPECT_EQ(f.shard.BeginGeneration(begin).status().code(), absl::StatusCode::kFailedPrecondition);
  // Pushes of generation 4 train on: step 0 again gives the same values.
  RecordingSink sink;
  ExpectOk(f.Push(0, 0, 0, grad, 1, &sink, 4), PushResult::kAccepted);
  EXPECT_EQ(f.Values(0), after_step0);
}

TEST(ParameterShardSyncTest, AReconnectingNodeLosesNothing) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(1.0f), 2), Filled(kElements, 0.0f));
  RecordingSink first, second, other;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &first), PushResult::kAccepted);
  f.shard.Detach(&first);  // Its stream broke mid-step.
  // The node reconnects and sends the whole step again.
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &second), PushResult::kDuplicate);
  ExpectOk(f.Push(0, 0, 1, Filled(kElements, 1.0f), 1, &second), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 3.0f), 1, &other), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 1, Filled(kElements, 3.0f), 1, &other), PushResult::kAccepted);
  EXPECT_TRUE(first.delivered().empty());
  ASSERT_NE(second.Last(0), nullptr);
  ASSERT_NE(second.Last(1), nullptr);
  EXPECT_EQ(FloatsOf(*second.Last(0)), Filled(64, -2.0f));
  EXPECT_EQ(FloatsOf(*second.Last(1)), Filled(64, -2.0f));
}

TEST(ParameterShardAsyncTest, AppliesEachPushOnArrivalAndAnswersThePusher) {
  Fixture f(MakeSpec(v1::ASYNC, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink a, b;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 0.8f), 2, &a), PushResult::kAccepted);
  ASSERT_NE(a.Last(0), nullptr);
  EXPECT_FLOAT_EQ(FloatsOf(*a.Last(0))[0], 0.96f);  // 1 - 0.1 * 0.8 / 2
  EXPECT_EQ(a.Last(0)->version(), 1u);
  EXPECT_EQ(a.Last(0)->step(), 1u);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 0.6f), 1, &b), PushResult::kAccepted);
  EXPECT_FLOAT_EQ(FloatsOf(*b.Last(0))[0], 0.90f);
  EXPECT_EQ(b.Last(0)->version(), 2u);
  EXPECT_EQ(a.delivered().size(), 1u);  // Only the pusher hears of an update.
  // Duplicate: re-sent, not applied; an older step is stale.
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 0.6f), 1, &b), PushResult::kDuplicate);
  EXPECT_EQ(f.Raw(0)->version(), 2u);
  ExpectOk(f.Push(3, 1, 0, Filled(kElements, 0.6f), 1, &b), PushResult::kAccepted);
  EXPECT_EQ(f.Push(2, 1, 0, Filled(kElements, 0.6f), 1, &b).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Non-finite: skipped, counted, version unchanged.
  std::vector<float> bad = Filled(kElements, 1.0f);
  bad[1] = std::nanf("");
  ExpectOk(f.Push(1, 0, 0, bad, 1, &a), PushResult::kAccepted);
  EXPECT_EQ(a.Last(0)->version(), 3u);
  bad[1] = -std::numeric_limits<float>::infinity();
  ExpectOk(f.Push(2, 0, 0, bad, 1, &a), PushResult::kAccepted);
  EXPECT_EQ(a.Last(0)->version(), 3u);
  EXPECT_EQ(f.shard.Status().updates_skipped_non_finite(), 2u);
}

TEST(ParameterShardAsyncTest, ANewGenerationDropsHeldPushesAndRestartsTheClocks) {
  Fixture f(MakeSpec(v1::BOUNDED_STALENESS, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink fast, slow;
  const std::vector<float> grad = Filled(kElements, 1.0f);
  ExpectOk(f.Push(0, 0, 0, grad, 1, &fast), PushResult::kAccepted);
  ExpectOk(f.Push(1, 0, 0, grad, 1, &fast), PushResult::kAccepted);
  ExpectOk(f.Push(2, 0, 0, grad, 1, &fast), PushResult::kHeld);
  ASSERT_EQ(f.Raw(0)->version(), 2u);

  // The slow node died: generation 1 of one node resumes at step 1 (the slowest's).
  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(1);
  request.set_num_nodes(1);
  request.set_resume_step(1);
  auto begun = f.shard.BeginGeneration(request);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->rolled_back(), 0u) << "no rollback outside SYNC";
  EXPECT_EQ(fast.ended().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fast.retries().empty()) << "the held push was dropped, not admitted";
  EXPECT_EQ(f.Raw(0)->version(), 2u) << "nothing of the held push was applied";

  // Generation 0 is refused now; the new one's node restarts its clock at step 1.
  EXPECT_EQ(f.Push(3, 1, 0, grad, 1, &slow).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.Push(0, 0, 0, grad, 1, &fast, 1).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "a step before the generation's start is stale";
  RecordingSink again;
  ExpectOk(f.Push(1, 0, 0, grad, 1, &again, 1), PushResult::kAccepted);
  ExpectOk(f.Push(2, 0, 0, grad, 1, &again, 1), PushResult::kAccepted);
  EXPECT_EQ(f.Raw(0)->version(), 4u);
  EXPECT_EQ(f.shard.Status().partitions(0).step(), 3u);
}

TEST(ParameterShardAsyncTest, AdamUsesThePartitionVersionAsItsStep) {
  v1::OptimizerSpec adam;
  adam.set_type(v1::ADAM);
  adam.set_learning_rate(0.001f);
  Fixture f(MakeSpec(v1::ASYNC, adam, 2), Filled(kElements, 1.0f));
  RecordingSink a, b;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 0.5f), 1, &a), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, 0.5f), 1, &b), PushResult::kAccepted);
  EXPECT_NEAR(FloatsOf(*b.Last(0))[0], 0.998f, 1e-6f);  // Updates 0 and 1, as in SYNC.
}

TEST(ParameterShardAsyncTest, BoundedStalenessHoldsTheFastNodeUntilTheSlowestCatchesUp) {
  Fixture f(MakeSpec(v1::BOUNDED_STALENESS, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink fast, slow;
  const std::vector<float> grad = Filled(kElements, 1.0f);
  ExpectOk(f.Push(0, 0, 0, grad, 1, &fast), PushResult::kAccepted);
  ExpectOk(f.Push(1, 0, 0, grad, 1, &fast), PushResult::kAccepted);  // 1 ahead: allowed.
  ExpectOk(f.Push(2, 0, 0, grad, 1, &fast), PushResult::kHeld);      // 2 ahead: waits.
  EXPECT_EQ(fast.delivered().size(), 2u);
  EXPECT_THAT(f.shard.Status().partitions(0).waiting_for(), ElementsAre(1));
  EXPECT_TRUE(fast.retries().empty());
  // Other partitions are not held back by partition 0.
  ExpectOk(f.Push(0, 0, 1, grad, 1, &fast), PushResult::kAccepted);

  ExpectOk(f.Push(0, 1, 0, grad, 1, &slow), PushResult::kAccepted);
  EXPECT_THAT(fast.retries(), ElementsAre(0));
  ExpectOk(f.Push(2, 0, 0, grad, 1, &fast), PushResult::kAccepted);
  EXPECT_EQ(f.Raw(0)->version(), 4u);
  EXPECT_EQ(f.shard.metrics().pushes_held.Value(), 1);
  // The fast node never ran more than staleness (1) steps ahead of the slowest.
  EXPECT_EQ(f.shard.Status().max_staleness_applied(), 1u);
}

// A node whose share of a short last batch is empty pushes zeros with 0 samples: in
// SYNC the step completes with the others' samples; asynchronously nothing is applied
// but the node's step advances.
TEST(ParameterShardSyncTest, ANodeWithoutSamplesPushesZerosAndTheStepCompletes) {
  Fixture f(MakeSpec(v1::SYNC, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink sinks[2];
  const std::vector<float> grad = Filled(kElements, 3.0f);
  ExpectOk(f.Push(0, 0, 0, grad, 3, &sinks[0]), PushResult::kAccepted);
  ExpectOk(f.Push(0, 1, 0, Filled(kElements, -0.0f), 0, &sinks[1]), PushResult::kAccepted);
  const std::vector<float> got = FloatsOf(*sinks[1].Last(0));
  for (float value : got) EXPECT_FLOAT_EQ(value, 1.0f - 0.1f * (3.0f / 3));

  Fixture g(MakeSpec(v1::ASYNC, Sgd(0.1f), 2), Filled(kElements, 1.0f));
  RecordingSink sink;
  ExpectOk(g.Push(0, 1, 0, Filled(kElements, 0.0f), 0, &sink), PushResult::kAccepted);
  EXPECT_EQ(g.Raw(0)->version(), 0u);
  for (float value : FloatsOf(*sink.Last(0))) EXPECT_FLOAT_EQ(value, 1.0f);
}

// Buffer partitions (BatchNorm statistics) take node 0's values as they are: no
// division, no optimizer, FLOAT32 whatever the wire dtype, in SYNC and ASYNC alike.
TEST(ParameterShardBufferTest, BufferPartitionsTakeNodeZerosValues) {
  for (v1::TrainingMode mode : {v1::SYNC, v1::ASYNC}) {
    SCOPED_TRACE(v1::TrainingMode_Name(mode));
    v1::OptimizerSpec adam;
    adam.set_type(v1::ADAM);
    v1::JobSpec spec = MakeSpec(mode, adam, 2);
    spec.set_wire_dtype(v1::FLOAT16);
    ParameterShard shard(ShardOptions{}, nullptr);
    const v1::InitHeader header = testing::MakeHeaderWithBuffers(spec, 64, 64, 1, 0);
    ASSERT_EQ(header.plan().partitions_size(), 2);
    ASSERT_TRUE(header.plan().partitions(1).buffers());
    ASSERT_TRUE(shard.Init(header, InitialValues(header, Filled(128, 1.0f))).ok());
    // Node 0's running statistics, and node 1's (which must be ignored).
    std::vector<float> node0(128, 0.0f), node1(128, 0.0f);
    for (int i = 64; i < 128; ++i) {
      node0[i] = 0.25f * static_cast<float>(i) + 1000.0f;  // Beyond fp16's exact integers.
      node1[i] = -7.0f;
    }
    RecordingSink sink0, sink1;
    // Node 1 first, with zero samples and non-zero values: accepted for buffers.
    ExpectOk(shard.Push(MakePush(header, 0, 0, 1, 1, node1, 0, v1::FLOAT32), &sink1),
             PushResult::kAccepted);
    // The job's wire dtype is refused for a buffer partition.
    absl::StatusOr<PushResult> narrow =
        shard.Push(MakePush(header, 0, 0, 0, 1, node0, 3, v1::FLOAT16), &sink0);
    ASSERT_FALSE(narrow.ok());
    EXPECT_THAT(narrow.status().message(), HasSubstr("buffer partitions travel as FLOAT32"));
    ExpectOk(shard.Push(MakePush(header, 0, 0, 0, 1, node0, 3, v1::FLOAT32), &sink0),
             PushResult::kAccepted);
    v1::PullRequest pull;
    pull.set_job_id("job-1");
    pull.add_partition_ids(1);
    const std::vector<float> values = FloatsOf(*(*shard.Pull(pull))[0]);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(values[i], node0[64 + i]) << i;
    if (mode == v1::ASYNC) {
      // Another node's later push leaves node 0's values in place.
      ExpectOk(shard.Push(MakePush(header, 0, 1, 1, 1, node1, 2, v1::FLOAT32), &sink1),
               PushResult::kAccepted);
      EXPECT_EQ(FloatsOf(*(*shard.Pull(pull))[0])[0], node0[64]);
    }
  }
}

TEST(ParameterShardInitTest, IsIdempotentAndRefusesAnotherJobOrPlan) {
  const v1::JobSpec spec = MakeSpec(v1::SYNC, Sgd(1.0f), 1);
  Fixture f(spec, Filled(kElements, 2.0f));
  RecordingSink sink;
  ExpectOk(f.Push(0, 0, 0, Filled(kElements, 1.0f), 1, &sink), PushResult::kAccepted);

  // Same job and plan: OK, created=false, trained values kept.
  auto again = f.shard.Init(f.header, InitialValues(f.header, Filled(kElements, 9.0f)));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  EXPECT_EQ(f.Values(0), Filled(64, 1.0f));

  const v1::InitHeader other_plan = MakeHeader(spec, kElements * 2, 1, 0);
  auto refused = f.shard.Init(other_plan, InitialValues(other_plan, Filled(kElements * 2, 0.0f)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr(f.header.plan().fingerprint()));
  EXPECT_THAT(refused.status().message(), HasSubstr(other_plan.plan().fingerprint()));
  const v1::InitHeader other_job = MakeHeader(spec, kElements, 1, 0, "job-2");
  EXPECT_EQ(f.shard.Init(other_job, InitialValues(other_job, f.initial)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A plan holds no more than the job's model (issue 23: a plan of 1,000 partitions of
// 4 MiB was accepted for a 10-parameter model, and one of 300,000 partitions made a
// 2 MB status listing every missing id).
TEST(ParameterShardInitTest, APlanMustFitTheModel) {
  auto header_for = [](v1::JobSpec spec, int64_t elements, int64_t partition_bytes) {
    spec.set_partition_bytes(partition_bytes);
    return MakeHeader(spec, elements, 1, 0);
  };
  // A logreg of 3 inputs and 2 classes has 8 parameters.
  v1::JobSpec logreg = MakeSpec(v1::SYNC, Sgd(1.0f), 1);
  logreg.mutable_model()->set_name("logreg");
  logreg.mutable_model()->add_layer_sizes(3);
  logreg.mutable_model()->add_layer_sizes(2);
  {
    ParameterShard shard(ShardOptions{}, nullptr);
    const v1::InitHeader header = header_for(logreg, 8, 256);
    EXPECT_TRUE(shard.Init(header, InitialValues(header, Filled(8, 1.0f))).ok());
  }
  {
    ParameterShard shard(ShardOptions{}, nullptr);
    const v1::InitHeader header = header_for(logreg, 1 << 20, 4 << 20);
    const absl::Status refused = shard.Init(header, {}).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.message(),
                HasSubstr("plan.total_elements 1048576 is more than the 8 parameters of model "
                          "logreg"));
  }
  // A TorchScript model: not more elements than its file has bytes.
  v1::JobSpec scripted = MakeSpec(v1::SYNC, Sgd(1.0f), 1);
  scripted.mutable_model()->set_name(kTorchScriptModel);
  scripted.mutable_model()->mutable_torchscript()->set_sha256(std::string(64, 'a'));
  scripted.mutable_model()->mutable_torchscript()->set_size_bytes(1000);
  {
    ParameterShard shard(ShardOptions{}, nullptr);
    const absl::Status refused = shard.Init(header_for(scripted, 1001, 256), {}).status();
    EXPECT_THAT(refused.message(), HasSubstr("is more than the model file's 1000 bytes"));
  }
  // More partitions than the model's cut can have (here: 64 one-float partitions of a
  // 64-float model, which the layer-following cut makes at most 3 of).
  {
    v1::InitHeader header = header_for(scripted, 64, 256);
    v1::PartitionPlan& plan = *header.mutable_plan();
    plan.clear_partitions();
    for (uint32_t id = 0; id < 64; ++id) {
      v1::Partition* partition = plan.add_partitions();
      partition->set_id(id);
      partition->set_offset(id);
      partition->set_length(1);
    }
    ParameterShard shard(ShardOptions{}, nullptr);
    const absl::Status refused = shard.Init(header, {}).status();
    EXPECT_THAT(refused.message(), HasSubstr("plan has 64 partitions; 64 elements in partitions "
                                             "of 256 bytes over 1 shards need at most 3"));
  }
  // A status names at most 16 missing partitions and counts the rest.
  {
    v1::JobSpec mlp = MakeSpec(v1::SYNC, Sgd(1.0f), 1);  // 784-256-128-10: 235,146 floats.
    ParameterShard shard(ShardOptions{}, nullptr);
    const absl::Status missing = shard.Init(header_for(mlp, 235146, 256), {}).status();
    EXPECT_THAT(missing.message(),
                HasSubstr("missing for partitions 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 and "
                          "3659 more (got 0 of 3675)"));
    EXPECT_LT(missing.message().size(), 300u);
  }
}

TEST(ParameterShardInitTest, RejectsMalformedInitialValues) {
  const v1::JobSpec spec = MakeSpec(v1::SYNC, Sgd(1.0f), 1);
  const v1::InitHeader header = MakeHeader(spec, kElements, 2, 1);  // Shard 1 owns partition 1.
  const std::vector<float> initial = Filled(kElements, 1.0f);
  auto init = [&](const v1::InitHeader& h, std::vector<v1::PartitionValues> values,
                  ShardOptions options = {}) {
    ParameterShard shard(options, nullptr);
    return shard.Init(h, std::move(values)).status();
  };
  auto values = [&] { return InitialValues(header, initial); };
  EXPECT_TRUE(init(header, values()).ok());

  std::vector<v1::PartitionValues> wrong = values();
  wrong[0].set_partition_id(0);
  EXPECT_THAT(init(header, wrong).message(), HasSubstr("partition 0 is not owned by shard 1"));
  wrong = values();
  wrong[0].mutable_data()->resize(8);
  EXPECT_THAT(init(header, wrong).message(), HasSubstr("expected 64 floats (256 bytes), got 8"));
  wrong = values();
  reinterpret_cast<float*>(wrong[0].mutable_data()->data())[3] = std::nanf("");
  EXPECT_THAT(init(header, wrong).message(), HasSubstr("NaN or Inf"));
  wrong = values();
  wrong[0].set_dtype(v1::FLOAT16);
  EXPECT_THAT(init(header, wrong).message(), HasSubstr("must be FLOAT32"));
  wrong = values();
  wrong[0].set_step(kMaxJobSteps);  // The largest step a job can have: accepted.
  EXPECT_TRUE(init(header, wrong).ok());
  for (uint64_t step : {kMaxJobSteps + 1, ~uint64_t{0}}) {
    wrong[0].set_step(step);
    EXPECT_THAT(init(header, wrong).message(),
                HasSubstr(absl::StrCat("partition 1: step ", step, " is above ", kMaxJobSteps)));
  }
  EXPECT_THAT(init(header, {}).message(), HasSubstr("missing for partitions 1 (got 0 of 1)"));
  wrong = values();
  wrong.push_back(wrong[0]);
  EXPECT_THAT(init(header, wrong).message(), HasSubstr("sent twice"));

  ShardOptions shard0;
  shard0.shard_index = 0;
  EXPECT_THAT(init(header, values(), shard0).message(),
              HasSubstr("sent to shard_index 1 but this is shard 0"));
  ShardOptions small;
  small.max_partition_bytes = 128;
  EXPECT_THAT(init(header, values(), small).message(),
              HasSubstr("exceeds this shard's --max_partition_bytes 128"));
  v1::InitHeader bad_job = header;
  bad_job.set_job_id("no spaces allowed");
  EXPECT_EQ(init(bad_job, values()).code(), absl::StatusCode::kInvalidArgument);
  v1::InitHeader bad_plan = header;
  bad_plan.mutable_plan()->mutable_partitions(1)->set_offset(3);
  EXPECT_THAT(init(bad_plan, values()).message(), HasSubstr("partition 1: offset must be 64"));
}

TEST(ParameterShardInitTest, TheHeaderInstallsTheJobAtItsGeneration) {
  ParameterShard shard(ShardOptions{}, nullptr);
  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(4);
  request.set_num_nodes(3);
  // Nothing is parked: the workers' InitPartitions carries the generation.
  absl::StatusOr<v1::BeginGenerationResponse> early = shard.BeginGeneration(request);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.status().message(), HasSubstr("holds no job"));
  v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 1), kElements, 1, 0);
  header.set_generation(4);
  header.set_num_nodes(3);
  auto init = shard.Init(header, InitialValues(header, Filled(kElements, 0.0f)));
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_TRUE(init->created());
  EXPECT_EQ(init->generation(), 4u);
  EXPECT_EQ(shard.Status().num_nodes(), 3u);
  EXPECT_EQ(shard.Status().generation(), 4u);
}

TEST(ParameterShardInitTest, AHeaderOfANewerGenerationMovesTheInstalledJob) {
  ParameterShard shard(ShardOptions{}, nullptr);
  v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 1), kElements, 1, 0);
  header.set_generation(4);
  header.set_num_nodes(1);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, Filled(kElements, 0.0f))).ok());
  // A node of generation 6 (the shard missed BeginGeneration 6 while empty).
  header.set_generation(6);
  header.set_num_nodes(2);
  auto moved = shard.Init(header, InitialValues(header, Filled(kElements, 5.0f)));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->created());
  EXPECT_EQ(moved->generation(), 6u);
  EXPECT_EQ(shard.Status().num_nodes(), 2u);
  // An older generation's header changes nothing.
  header.set_generation(5);
  header.set_num_nodes(7);
  auto stale = shard.Init(header, InitialValues(header, Filled(kElements, 5.0f)));
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->generation(), 6u);
  EXPECT_EQ(shard.Status().num_nodes(), 2u);
  // The trained values were never replaced.
  v1::PullRequest pull;
  pull.set_job_id(header.job_id());
  EXPECT_EQ(FloatsOf(*(*shard.Pull(pull))[0])[0], 0.0f);
  // A header whose resume step the partitions cannot reach fails like BeginGeneration.
  header.set_generation(9);
  header.set_num_nodes(1);
  header.set_resume_step(40);
  auto unreachable = shard.Init(header, InitialValues(header, Filled(kElements, 5.0f)));
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unreachable.status().message(), HasSubstr("InitPartitions: BeginGeneration 9"));
}

TEST(ParameterShardInitTest, NodeCountsAreBounded) {
  ParameterShard shard(ShardOptions{}, nullptr);
  v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Sgd(1.0f), 1), kElements, 1, 0);
  header.set_num_nodes(UINT32_MAX);
  auto init = shard.Init(header, InitialValues(header, Filled(kElements, 0.0f)));
  EXPECT_EQ(init.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(init.status().message(), HasSubstr("num_nodes 4294967295 is above 65536"));
  header.set_num_nodes(1);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, Filled(kElements, 0.0f))).ok());
  v1::BeginGenerationRequest request;
  request.set_job_id(header.job_id());
  request.set_generation(2);
  request.set_num_nodes(kMaxNodes + 1);
  EXPECT_THAT(shard.BeginGeneration(request).status().message(),
              HasSubstr("num_nodes 65537 is not in [1, 65536]"));
  request.set_num_nodes(kMaxNodes);
  EXPECT_TRUE(shard.BeginGeneration(request).ok());
}

TEST(ParameterShardPullTest, AnswersCurrentValuesOrNamesTheProblem) {
  ParameterShard empty(ShardOptions{}, nullptr);
  v1::PullRequest request;
  request.set_job_id("job-1");
  EXPECT_EQ(empty.Pull(request).status().code(), absl::StatusCode::kFailedPrecondition);
  Fixture f(MakeSpec(v1::SYNC, Sgd(1.0f), 1), Ramp(kElements, 0.0f, 1.0f));
  auto all = f.shard.Pull(request);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(FloatsOf(*(*all)[1])[0], 64.0f);
  request.add_partition_ids(5);
  EXPECT_THAT(f.shard.Pull(request).status().message(),
              HasSubstr("partition 5 is not owned by shard 0"));
  request.set_job_id("job-2");
  EXPECT_EQ(f.shard.Pull(request).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tributary::ps
