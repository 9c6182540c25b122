// The whole system as separate processes on loopback: coordinator, PS shards and
// worker processes with several replicas each. SYNC training must give, step for
// step, the parameters of one replica training with the same global batch (the
// single-process trainer), whatever the split; ASYNC and bounded staleness must
// train; a worker killed mid-run must not stop the job nor make any step count twice.
#include <gtest/gtest.h>

#include <cstring>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cli/parameters.h"
#include "common/job_spec.h"
#include "tests/training/cluster_fixture.h"
#include "worker/engine/trainer.h"

namespace tributary::testing {
namespace {

// Test loss of the job's initial parameters (every party derives them from the seed).
double UntrainedTestLoss(const v1::JobSpec& spec) {
  engine::TrainerOptions options;
  options.replicas = 1;
  auto trainer = engine::LocalTrainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return 0;
  absl::StatusOr<engine::LossStats> loss = (*trainer)->Evaluate();
  EXPECT_TRUE(loss.ok()) << loss.status();
  return loss.ok() ? loss->mean_loss() : 0;
}

v1::Job RunToCompletion(cli::LocalCluster& cluster, const v1::JobSpec& spec,
                        absl::Duration timeout = absl::Minutes(3)) {
  absl::StatusOr<v1::Job> submitted = SubmitJob(cluster, spec);
  EXPECT_TRUE(submitted.ok()) << submitted.status();
  if (!submitted.ok()) return v1::Job();
  absl::StatusOr<v1::Job> job = WaitForJob(cluster, submitted->job_id(), Finished, timeout);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return v1::Job();
  EXPECT_EQ(job->state(), v1::COMPLETED) << job->state_reason();
  return *job;
}

void ExpectEqualsSingleReplica(cli::LocalCluster& cluster, const v1::JobSpec& spec,
                               uint64_t steps) {
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster.coordinator_channel(), cluster.channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->step, steps);
  const std::vector<float> expected = ReferenceParameters(spec, steps);
  ASSERT_EQ(pulled->values.size(), expected.size());
  const double difference = MaxRelativeDifference(pulled->values, expected);
  EXPECT_LE(difference, 1e-5) << "distributed vs single replica after " << steps << " steps";
  // And training did move the parameters (a test that compares two untouched initial
  // buffers would prove nothing).
  v1::JobSpec untrained = spec;
  EXPECT_GT(MaxRelativeDifference(pulled->values, ReferenceParameters(untrained, 0)), 1e-3);
}

v1::JobSpec FashionMlp(uint32_t batch, uint64_t steps, uint32_t replicas, uint32_t nodes) {
  v1::JobSpec spec;
  spec.set_name("exactness");
  spec.mutable_model()->set_name("mlp");  // 784-256-128-10
  spec.mutable_dataset()->set_format(v1::IDX);
  spec.mutable_dataset()->set_train_limit(1000);
  spec.mutable_dataset()->set_test_limit(200);
  spec.set_global_batch_size(batch);
  spec.set_max_steps(steps);
  spec.set_epochs(0);
  spec.mutable_optimizer()->set_type(v1::MOMENTUM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  spec.set_replicas_per_worker(replicas);
  spec.set_nodes_min(nodes);
  // Many partitions, so pushes overlap backward and both shards hold several.
  spec.set_partition_bytes(64 << 10);
  spec.set_seed(11);
  return WithDefaults(spec);
}

TEST(DistributedTrainingTest, SyncOnTwoNodesEqualsOneReplica) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;  // Two nodes of one worker process each.
  shape.worker_args = {"--noexit_after_job"};  // The same workers for the second job.
  auto cluster = StartCluster("two_nodes", shape);
  const v1::JobSpec spec = FashionMlp(/*batch=*/64, /*steps=*/20, /*replicas=*/2, /*nodes=*/2);
  const v1::Job job = RunToCompletion(*cluster, spec);
  EXPECT_EQ(job.step(), 20u);
  ExpectEqualsSingleReplica(*cluster, spec, 20);
  // One replica per node on the same cluster: each node pushes straight from its
  // replica's gradient buffer (IntraNodeReducer::ReduceInPlace), no copy, same values.
  v1::JobSpec one = FashionMlp(/*batch=*/64, /*steps=*/20, /*replicas=*/1, /*nodes=*/2);
  one.set_name("exactness-one-replica");
  EXPECT_EQ(RunToCompletion(*cluster, one).step(), 20u);
  ExpectEqualsSingleReplica(*cluster, one, 20);
}

// The same job on two fresh clusters of the same layout (2 nodes x 2 replicas, 2
// shards) ends with the same parameters bit for bit: with AVX2 the engine's buffers
// must be aligned for that (worker/engine/aligned.h). The first run's workers use the
// PS's TCP data plane (updates received straight into the parameters), the second's
// gRPC PushPull: the transport changes no bit either.
TEST(DistributedTrainingTest, TheSameJobOnTheSameLayoutGivesTheSameBits) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;
  const v1::JobSpec spec = FashionMlp(/*batch=*/64, /*steps=*/40, /*replicas=*/2, /*nodes=*/2);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    shape.worker_args = {run == 0 ? "--ps_transport=tcp" : "--ps_transport=grpc"};
    auto cluster = StartCluster(absl::StrCat("same_bits_", run), shape);
    const v1::Job job = RunToCompletion(*cluster, spec);
    ASSERT_EQ(job.step(), 40u);
    absl::StatusOr<cli::PulledParameters> pulled =
        cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    runs.push_back(pulled->values);
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  size_t differing = 0;
  for (size_t i = 0; i < runs[0].size(); ++i) {
    differing += std::memcmp(&runs[0][i], &runs[1][i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differing, 0u) << "of " << runs[0].size() << " parameters, max relative difference "
                           << MaxRelativeDifference(runs[1], runs[0]);
}

TEST(DistributedTrainingTest, SyncOnOneGlooNodeWithAnUnevenBatchEqualsOneReplica) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;
  shape.nodes = 1;  // Both processes on one node: Gloo reduces them, one pushes.
  auto cluster = StartCluster("gloo_node", shape);
  // 6 replicas, a batch of 50 (9,9,8,8,8,8), and 1000 % 50 == 0 is avoided with a
  // limit that leaves a short last batch: 530 samples = 10 x 50 + 30.
  v1::JobSpec spec = FashionMlp(/*batch=*/50, /*steps=*/20, /*replicas=*/3, /*nodes=*/1);
  spec.mutable_dataset()->set_train_limit(530);
  const v1::Job job = RunToCompletion(*cluster, spec);
  EXPECT_EQ(job.step(), 20u);
  ExpectEqualsSingleReplica(*cluster, spec, 20);

  // The two processes really formed one node group through Gloo.
  absl::StatusOr<std::vector<v1::ShardStatus>> shards = ShardStatuses(*cluster);
  ASSERT_TRUE(shards.ok()) << shards.status();
  for (const v1::ShardStatus& shard : *shards) EXPECT_EQ(shard.num_nodes(), 1u);
}

TEST(DistributedTrainingTest, AsyncAndBoundedStalenessTrainAndRespectTheBound) {
  for (v1::TrainingMode mode : {v1::ASYNC, v1::BOUNDED_STALENESS}) {
    SCOPED_TRACE(v1::TrainingMode_Name(mode));
    // A cluster per job: the local cluster's workers leave once their job ends.
    ClusterShape shape;
    shape.ps_shards = 2;
    shape.workers = 2;
    auto cluster = StartCluster(v1::TrainingMode_Name(mode), shape);
    v1::JobSpec spec = SyntheticJob(/*batch=*/32, /*steps=*/150);
    spec.set_mode(mode);
    spec.set_staleness(mode == v1::BOUNDED_STALENESS ? 1 : 0);
    spec.set_nodes_min(2);
    spec.set_nodes_max(2);
    spec.set_eval_interval_steps(50);
    const v1::Job job = RunToCompletion(*cluster, spec);
    EXPECT_EQ(job.step(), 150u);
    // The loss fell: the trained parameters' test loss against the untrained ones'
    // (a short job may finish between two heartbeats, so the progress curve can hold
    // a single point).
    EXPECT_LT(job.result().test_loss(), 0.7 * UntrainedTestLoss(spec))
        << "test loss after 150 steps";
    EXPECT_GT(job.result().test_accuracy(), 0.5);  // 4 well separated classes.
    absl::StatusOr<std::vector<v1::ShardStatus>> shards = ShardStatuses(*cluster);
    ASSERT_TRUE(shards.ok()) << shards.status();
    for (const v1::ShardStatus& shard : *shards) {
      EXPECT_EQ(shard.mode(), mode);
      EXPECT_GT(shard.updates_applied(), 0u);
      if (mode == v1::BOUNDED_STALENESS) {
        EXPECT_LE(shard.max_staleness_applied(), 1u) << "shard " << shard.shard_index();
      }
    }
  }
}

TEST(DistributedTrainingTest, AKilledWorkerEndsItsGenerationAndNoStepCountsTwice) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 3;  // Three nodes; the job needs two.
  auto cluster = StartCluster("failure", shape);
  v1::JobSpec spec = SyntheticJob(/*batch=*/48, /*steps=*/1200);
  spec.set_nodes_min(2);
  spec.set_nodes_max(3);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Killed once all three nodes train in one generation.
  absl::StatusOr<v1::Job> running =
      WaitForNodes(*cluster, submitted->job_id(), /*nodes=*/3, /*min_step=*/30, absl::Minutes(2));
  ASSERT_TRUE(running.ok()) << running.status();
  const uint64_t generation_before = running->generation();
  cluster->KillWorker(2);

  absl::StatusOr<v1::Job> job =
      WaitForJob(*cluster, submitted->job_id(), Finished, absl::Minutes(3));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::COMPLETED) << job->state_reason();
  EXPECT_GT(job->generation(), generation_before);
  bool explained = false;
  for (const v1::JobEvent& event : job->events()) {
    if (event.generation() > generation_before || absl::StrContains(event.reason(), "heartbeat")) {
      explained = explained || !event.reason().empty();
    }
  }
  EXPECT_TRUE(explained) << "the event log must say why the generation changed";

  // Every partition took exactly one update per step: a step applied twice, or a
  // partial step kept after the failure, would leave a version off the step count.
  absl::StatusOr<std::vector<v1::ShardStatus>> shards = ShardStatuses(*cluster);
  ASSERT_TRUE(shards.ok()) << shards.status();
  for (const v1::ShardStatus& shard : *shards) {
    for (const v1::PartitionStatus& partition : shard.partitions()) {
      EXPECT_EQ(partition.version(), 1200u) << "partition " << partition.partition_id();
      EXPECT_EQ(partition.step(), 1200u) << "partition " << partition.partition_id();
    }
  }
}

}  // namespace
}  // namespace tributary::testing
