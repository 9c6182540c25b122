// The aggregators driven directly, without a shard: a job from BuildShardJob, a sink
// table, metrics and a fake clock.
#include "services/parameter_server/aggregator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using ::testing::ElementsAre;
using testing::FloatsOf;
using ::testing::HasSubstr;
using testing::RecordingSink;

constexpr size_t kLength = 4;

class AggregatorTest : public ::testing::Test {
 protected:
  void Make(v1::TrainingMode mode, uint32_t nodes, uint32_t staleness = 0,
            v1::OptimizerSpec outer = v1::OptimizerSpec()) {
    v1::JobSpec spec = testing::MakeSpec(mode, testing::Sgd(1.0f), nodes);
    spec.set_staleness(staleness);
    if (mode == v1::LOCAL_SGD) {
      spec.set_sync_every(4);
      *spec.mutable_outer_optimizer() = outer;
    }
    spec = WithDefaults(spec);
    AggregatorContext context;
    context.metrics = &metrics_;
    context.sinks = &sinks_;
    context.clock = &clock_;
    context.step_moved = [this](ShardPartition&, uint64_t from, uint64_t to) {
      moves_.push_back({from, to});
    };
    JobSource source;
    source.job_id = "job-1";
    source.spec = spec;
    source.num_nodes = nodes;
    source.generation = 1;
    JobSource::Seed& seed = source.partitions.emplace_back();
    seed.partition.set_id(0);
    seed.partition.set_length(kLength);
    seed.values = std::make_shared<v1::PartitionValues>();
    seed.values->set_dtype(v1::FLOAT32);
    seed.values->set_data(std::string(kLength * sizeof(float), '\0'));
    absl::StatusOr<Optimizer> optimizer = Optimizer::Create(PsOptimizerSpec(spec), 100);
    ASSERT_TRUE(optimizer.ok());
    absl::StatusOr<std::unique_ptr<ShardJob>> job =
        BuildShardJob(std::move(source), *std::move(optimizer), MakeAggregator(mode, context));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
    sinks_.Reset(nodes);
  }

  absl::StatusOr<PushResult> Push(uint32_t node, uint64_t step, float value, uint64_t samples,
                                  NodeSink* sink, uint32_t steps = 0) {
    v1::GradientPush push;
    push.set_node_rank(node);
    push.set_step(step);
    push.set_steps(steps);
    push.set_sample_count(samples);
    push.set_dtype(v1::FLOAT32);
    std::vector<float> grad(kLength, value);
    push.set_data(reinterpret_cast<const char*>(grad.data()), kLength * sizeof(float));
    sinks_.Register(node, sink);
    ShardPartition& p = *job_->partitions[0];
    absl::MutexLock lock(&p.mu);
    return job_->aggregator->Push(*job_, p, ViewOf(push), sink);
  }

  ShardPartition& partition() { return *job_->partitions[0]; }

  FakeClock clock_;
  prometheus::Registry registry_;
  ShardMetrics metrics_{registry_};
  SinkTable sinks_{metrics_};
  std::unique_ptr<ShardJob> job_;
  std::vector<std::pair<uint64_t, uint64_t>> moves_;
  RecordingSink a_, b_;
};

TEST_F(AggregatorTest, SyncSumsEveryNodeThenAppliesTheMeanAndTellsEveryone) {
  Make(v1::SYNC, 2);
  ASSERT_EQ(*Push(0, 0, 3.0f, 1, &a_), PushResult::kAccepted);
  EXPECT_TRUE(a_.delivered().empty()) << "nothing before the last node pushed";
  clock_.Advance(absl::Milliseconds(250));
  EXPECT_EQ(*Push(0, 0, 3.0f, 1, &a_), PushResult::kDuplicate);
  ASSERT_EQ(*Push(1, 0, 5.0f, 3, &b_), PushResult::kAccepted);
  // Mean gradient (3 + 5) / 4 samples = 2; SGD with lr 1 from 0.
  ASSERT_NE(a_.Last(0), nullptr);
  EXPECT_THAT(FloatsOf(*a_.Last(0)), ElementsAre(-2.0f, -2.0f, -2.0f, -2.0f));
  EXPECT_EQ(a_.Last(0)->step(), 1u);
  EXPECT_EQ(b_.Last(0), a_.Last(0));
  EXPECT_THAT(moves_, ElementsAre(std::pair<uint64_t, uint64_t>{0, 1}));
  absl::MutexLock lock(&partition().mu);
  EXPECT_DOUBLE_EQ(partition().aggregation_wait_seconds, 0.25) << "measured on the given clock";
  EXPECT_EQ(metrics_.updates_applied.Value(), 1);
  EXPECT_EQ(metrics_.pushes_duplicate.Value(), 1);
}

// How long the nodes' pushes waited for each step's last one, summed over the nodes:
// the straggler's cost, counted per partition. Three nodes arriving at 0, 0.1 and 0.4 s
// wait 0.4 + 0.3 + 0; the next step, at 0, 0 and 0.05 s, 0.05 + 0.05 + 0.
TEST_F(AggregatorTest, SyncCountsHowLongThePushesWaitedForTheSlowest) {
  Make(v1::SYNC, 3);
  RecordingSink c;
  ASSERT_EQ(*Push(0, 0, 1.0f, 1, &a_), PushResult::kAccepted);
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_EQ(*Push(1, 0, 1.0f, 1, &b_), PushResult::kAccepted);
  clock_.Advance(absl::Milliseconds(300));
  ASSERT_EQ(*Push(2, 0, 1.0f, 1, &c), PushResult::kAccepted);
  EXPECT_NEAR(metrics_.SlowestWait(0).Value(), 0.7, 1e-9) << "the partition's series";
  ASSERT_EQ(*Push(2, 1, 1.0f, 1, &c), PushResult::kAccepted);
  ASSERT_EQ(*Push(0, 1, 1.0f, 1, &a_), PushResult::kAccepted);
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_EQ(*Push(1, 1, 1.0f, 1, &b_), PushResult::kAccepted);
  EXPECT_NEAR(metrics_.SlowestWait(0).Value(), 0.8, 1e-9) << "the partition's series";
}

TEST_F(AggregatorTest, SyncAnswersAPushOfADoneStepWithItsValuesAndRefusesOthers) {
  Make(v1::SYNC, 1);
  ASSERT_EQ(*Push(0, 0, 1.0f, 1, &a_), PushResult::kAccepted);
  EXPECT_EQ(*Push(0, 0, 1.0f, 1, &a_), PushResult::kDuplicate);
  EXPECT_EQ(a_.delivered().size(), 2u) << "the duplicate gets the values again";
  EXPECT_THAT(Push(0, 5, 1.0f, 1, &a_).status().message(),
              HasSubstr("step 5 for partition 0 from node 0 is ahead"));
  EXPECT_EQ(metrics_.Rejected(RejectReason::kStepAhead).Value(), 1);
}

TEST_F(AggregatorTest, SyncSkipsANonFiniteUpdateButStillAdvances) {
  Make(v1::SYNC, 1);
  ASSERT_EQ(*Push(0, 0, std::numeric_limits<float>::infinity(), 1, &a_), PushResult::kAccepted);
  EXPECT_THAT(FloatsOf(*a_.Last(0)), ElementsAre(0.0f, 0.0f, 0.0f, 0.0f));
  EXPECT_EQ(a_.Last(0)->step(), 1u);
  EXPECT_EQ(metrics_.updates_skipped_non_finite.Value(), 1);
}

TEST_F(AggregatorTest, SyncResumeRollsBackOneStepOrSaysWhyItCannot) {
  Make(v1::SYNC, 1);
  ASSERT_TRUE(Push(0, 0, 1.0f, 1, &a_).ok());
  ASSERT_TRUE(Push(0, 1, 1.0f, 1, &a_).ok());
  absl::MutexLock lock(&partition().mu);
  const Aggregator& aggregator = *job_->aggregator;
  EXPECT_EQ(aggregator.CannotResume(partition(), 1, 3), "");
  EXPECT_EQ(aggregator.CannotResume(partition(), 2, 3), "");
  EXPECT_EQ(aggregator.CannotResume(partition(), 0, 3),
            "partition 0 of shard 3 is at step 2 and keeps step 1");
  EXPECT_TRUE(aggregator.ValuesAt(partition(), 1).has_value());
  EXPECT_FALSE(aggregator.ValuesAt(partition(), 0).has_value());
  uint32_t rolled_back = 0;
  uint32_t discarded = 0;
  job_->aggregator->Resume(partition(), 1, 3, &rolled_back, &discarded);
  EXPECT_EQ(rolled_back, 1u);
  EXPECT_EQ(partition().step, 1u);
  EXPECT_EQ(partition().values->step(), 1u);
  EXPECT_EQ(partition().pushed.size(), 3u);
}

TEST_F(AggregatorTest, LocalSgdAveragesTheNodesChangesOverARoundWithTheOuterOptimizer) {
  v1::OptimizerSpec outer;
  outer.set_type(v1::SGD);
  outer.set_learning_rate(0.5f);
  Make(v1::LOCAL_SGD, 2, 0, outer);
  // Round [0, 4): node 0 moved by 2 per sample over 1 sample, node 1 by 6 over 3.
  ASSERT_EQ(*Push(0, 0, 2.0f, 1, &a_, 4), PushResult::kAccepted);
  EXPECT_EQ(*Push(0, 0, 2.0f, 1, &a_, 4), PushResult::kDuplicate);
  ASSERT_EQ(*Push(1, 0, 18.0f, 3, &b_, 4), PushResult::kAccepted);
  // Mean change (2 + 18) / 4 = 5; outer SGD at 0.5 from 0: -2.5. The next round is at 4.
  ASSERT_NE(a_.Last(0), nullptr);
  EXPECT_THAT(FloatsOf(*a_.Last(0)), ElementsAre(-2.5f, -2.5f, -2.5f, -2.5f));
  EXPECT_EQ(a_.Last(0)->step(), 4u);
  EXPECT_EQ(b_.Last(0), a_.Last(0));
  EXPECT_THAT(moves_, ElementsAre(std::pair<uint64_t, uint64_t>{0, 4}));
  // A push of the done round is a duplicate; one of the round after next is ahead.
  EXPECT_EQ(*Push(0, 0, 2.0f, 1, &a_, 4), PushResult::kDuplicate);
  EXPECT_THAT(Push(0, 8, 1.0f, 1, &a_, 4).status().message(),
              HasSubstr("is ahead: the partition is at step 4 (LOCAL_SGD runs one round"));
  // The last round may be short, but every node must say the same length.
  ASSERT_EQ(*Push(0, 4, 1.0f, 1, &a_, 2), PushResult::kAccepted);
  absl::StatusOr<PushResult> mismatched = Push(1, 4, 1.0f, 1, &b_, 3);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(),
              HasSubstr("covers 3 step(s) but the round's first push covered 2"));
  EXPECT_EQ(metrics_.Rejected(RejectReason::kWrongSteps).Value(), 1);
  ASSERT_EQ(*Push(1, 4, 1.0f, 1, &b_, 2), PushResult::kAccepted);
  EXPECT_EQ(a_.Last(0)->step(), 6u);
}

TEST_F(AggregatorTest, LocalSgdRollsBackOneRound) {
  Make(v1::LOCAL_SGD, 1);
  ASSERT_TRUE(Push(0, 0, 1.0f, 1, &a_, 4).ok());
  ASSERT_TRUE(Push(0, 4, 1.0f, 1, &a_, 4).ok());
  absl::MutexLock lock(&partition().mu);
  const Aggregator& aggregator = *job_->aggregator;
  EXPECT_EQ(aggregator.CannotResume(partition(), 8, 0), "");
  EXPECT_EQ(aggregator.CannotResume(partition(), 4, 0), "");
  EXPECT_EQ(aggregator.CannotResume(partition(), 0, 0),
            "partition 0 of shard 0 is at step 8 and keeps step 4");
  EXPECT_TRUE(aggregator.ValuesAt(partition(), 4).has_value());
  EXPECT_FALSE(aggregator.ValuesAt(partition(), 5).has_value());
  uint32_t rolled_back = 0;
  uint32_t discarded = 0;
  job_->aggregator->Resume(partition(), 4, 1, &rolled_back, &discarded);
  EXPECT_EQ(rolled_back, 1u);
  EXPECT_EQ(partition().step, 4u);
  EXPECT_EQ(partition().values->step(), 4u);
  // Plain averaging (the default outer SGD at rate 1): one node's mean change applied.
  EXPECT_THAT(FloatsOf(*partition().values), ElementsAre(-1.0f, -1.0f, -1.0f, -1.0f));
}

TEST_F(AggregatorTest, AsyncAppliesEachPushToThePusherAlone) {
  Make(v1::ASYNC, 2);
  ASSERT_EQ(*Push(0, 0, 4.0f, 2, &a_), PushResult::kAccepted);
  EXPECT_THAT(FloatsOf(*a_.Last(0)), ElementsAre(-2.0f, -2.0f, -2.0f, -2.0f));
  EXPECT_TRUE(b_.delivered().empty());
  EXPECT_EQ(*Push(0, 0, 4.0f, 2, &a_), PushResult::kDuplicate);
  EXPECT_EQ(*Push(0, 0, 1.0f, 1, &a_), PushResult::kDuplicate)
      << "the same step, whatever its data";
  ASSERT_EQ(*Push(0, 1, 1.0f, 1, &a_), PushResult::kAccepted);
  EXPECT_THAT(Push(0, 0, 1.0f, 1, &a_).status().message(),
              HasSubstr("stale step 0 for partition 0 from node 0: it already pushed step 1"));
  // The slowest node (1, nothing pushed) keeps the partition at step 0.
  absl::MutexLock lock(&partition().mu);
  EXPECT_EQ(partition().step, 0u);
  EXPECT_TRUE(job_->aggregator->WaitingFor(partition(), 1));
  EXPECT_FALSE(job_->aggregator->WaitingFor(partition(), 0));
  EXPECT_EQ(partition().max_staleness_applied, 1u);
}

TEST_F(AggregatorTest, BoundedStalenessHoldsAPushUntilTheSlowestNodeCatchesUp) {
  Make(v1::BOUNDED_STALENESS, 2, /*staleness=*/1);
  ASSERT_EQ(*Push(0, 0, 1.0f, 1, &a_), PushResult::kAccepted);
  ASSERT_EQ(*Push(0, 1, 1.0f, 1, &a_), PushResult::kAccepted);
  EXPECT_EQ(*Push(0, 2, 1.0f, 1, &a_), PushResult::kHeld);
  EXPECT_EQ(*Push(0, 2, 1.0f, 1, &a_), PushResult::kHeld) << "held once";
  EXPECT_TRUE(a_.retries().empty());
  ASSERT_EQ(*Push(1, 0, 1.0f, 1, &b_), PushResult::kAccepted);
  EXPECT_THAT(a_.retries(), ElementsAre(0u));
  EXPECT_THAT(moves_, ElementsAre(std::pair<uint64_t, uint64_t>{0, 1}));
  absl::MutexLock lock(&partition().mu);
  EXPECT_TRUE(partition().held.empty());
  uint32_t rolled_back = 0;
  uint32_t discarded = 0;
  job_->aggregator->Resume(partition(), 1, 2, &rolled_back, &discarded);
  EXPECT_EQ(rolled_back, 0u);
  EXPECT_EQ(job_->aggregator->CannotResume(partition(), 0, 0), "") << "no rollback needed";
}

TEST(BuildShardJobTest, RefusesOptimizerStateOfTheWrongSize) {
  JobSource source;
  source.spec = WithDefaults(testing::MakeSpec(v1::SYNC, testing::Sgd(1.0f), 1));
  JobSource::Seed& seed = source.partitions.emplace_back();
  seed.partition.set_id(3);
  seed.partition.set_length(4);
  seed.values = std::make_shared<v1::PartitionValues>();
  seed.state = {1.0f};  // SGD keeps no state.
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(source.spec.optimizer(), 10);
  ASSERT_TRUE(optimizer.ok());
  absl::StatusOr<std::unique_ptr<ShardJob>> job =
      BuildShardJob(std::move(source), *std::move(optimizer), nullptr);
  EXPECT_THAT(job.status().message(), HasSubstr("partition 3: optimizer state of 1 floats"));
}


}  // namespace
}  // namespace tributary::ps
