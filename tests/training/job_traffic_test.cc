// The PS traffic a job reports is that job's own, on a cluster that outlives it: two
// jobs in a row on the same worker and shard processes, and the second job's result
// and history count only its own pushes and pulls (it used to report the workers' and
// shards' counters since they started: a 400-step job on a long-lived cluster showed
// 4.2 GB for its 0.38 GB).
#include <gtest/gtest.h>

#include "tests/training/cluster_fixture.h"

namespace tributary::testing {
namespace {

// The test job's model, 32-24-16-4: what one node pushes per step (float32).
constexpr uint64_t kParameters = 32 * 24 + 24 + 24 * 16 + 16 + 16 * 4 + 4;
constexpr uint64_t kNodes = 2;

v1::Job RunJob(cli::LocalCluster& cluster, uint64_t steps) {
  v1::JobSpec spec = SyntheticJob(32, steps);
  spec.set_nodes_min(kNodes);
  spec.set_nodes_max(kNodes);
  const v1::Job job = RunToTheEnd(cluster, spec);
  EXPECT_EQ(job.state(), v1::COMPLETED) << job.state_reason();
  return job;
}

TEST(JobTrafficTest, EachJobOfALongLivedClusterCountsOnlyItsOwnBytes) {
  ClusterShape shape;
  shape.worker_args = {"--noexit_after_job"};  // The same workers for both jobs.
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("traffic", shape);
  const v1::Job first = RunJob(*cluster, 300);
  const v1::Job second = RunJob(*cluster, 100);
  ASSERT_EQ(second.state(), v1::COMPLETED);
  EXPECT_EQ(first.result().bytes_pushed(), 300 * kNodes * kParameters * 4);
  EXPECT_EQ(second.result().bytes_pushed(), 100 * kNodes * kParameters * 4)
      << "not the workers' or the shards' counts since they started";
  EXPECT_LT(second.result().bytes_pulled(), first.result().bytes_pulled());
  EXPECT_GE(second.result().bytes_pulled(), second.result().bytes_pushed());
  // The shards do count since they started: more than the second job moved.
  absl::StatusOr<std::vector<v1::ShardStatus>> shards = ShardStatuses(*cluster);
  ASSERT_TRUE(shards.ok()) << shards.status();
  uint64_t shard_bytes_in = 0;
  for (const v1::ShardStatus& shard : *shards) shard_bytes_in += shard.bytes_in();
  EXPECT_EQ(shard_bytes_in, first.result().bytes_pushed() + second.result().bytes_pushed());
}

}  // namespace
}  // namespace tributary::testing
