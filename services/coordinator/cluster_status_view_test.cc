#include "services/coordinator/cluster_status_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(StragglerThresholdTest, FactorTimesTheLowerMedian) {
  EXPECT_EQ(StragglerThreshold({}, 1.5), 0);
  EXPECT_EQ(StragglerThreshold({1.0}, 1.5), 0);
  // Two workers: the lower one is the median, so the slow one stands out.
  EXPECT_DOUBLE_EQ(StragglerThreshold({4.0, 1.0}, 1.5), 1.5);
  EXPECT_DOUBLE_EQ(StragglerThreshold({1.0, 2.0, 9.0}, 2), 4.0);
}

TEST(FillWaitingReasonTest, OnlyTheWaitingActiveJob) {
  v1::Job job;
  job.set_state(v1::RENDEZVOUS);
  FillWaitingReason(job, /*generation_active=*/true, "x", "");
  EXPECT_EQ(job.waiting_reason(), "");
  FillWaitingReason(job, false, "waiting for nodes", "");
  EXPECT_EQ(job.waiting_reason(), "waiting for nodes");
  for (v1::JobState state : {v1::PAUSED, v1::COMPLETED, v1::FAILED, v1::STOPPED}) {
    v1::Job other;
    other.set_state(state);
    FillWaitingReason(other, false, "x", "PS shard 0 at a:1 is not answering (down)");
    EXPECT_EQ(other.waiting_reason(), "") << v1::JobState_Name(state);
  }
  // A running job whose shard stopped answering waits for it, and says so.
  v1::Job running;
  running.set_state(v1::RUNNING);
  FillWaitingReason(running, true, "", "PS shard 1 at h:2 is not answering (Deadline Exceeded)");
  EXPECT_EQ(running.waiting_reason(),
            "PS shard 1 at h:2 is not answering (Deadline Exceeded): training waits until it "
            "answers again");
}

class ClusterStatusOfTest : public ::testing::Test {
 protected:
  ClusterStatusOfTest() {
    v1::JobSpec spec;
    spec.mutable_dataset()->set_format(v1::SYNTHETIC);
    job_ = *jobs_.Submit(WithDefaults(spec), kT0);
    for (int i = 0; i < 3; ++i) {
      v1::RegisterWorkerRequest request;
      request.set_node_name(i < 2 ? "n0" : "n1");
      request.set_grpc_port(5000 + i);
      ids_.push_back(workers_.Add(request, kT0).id);
    }
    v1::RegisterParameterServerRequest shard;
    shard.set_address("ps0:1");
    shard.set_shard_index(0);
    EXPECT_TRUE(shards_.Register(shard, kT0).ok());
  }

  StatusInputs Inputs() {
    StatusInputs inputs;
    inputs.jobs = &jobs_;
    inputs.workers = &workers_;
    inputs.shards = &shards_;
    inputs.generation = &generation_;
    inputs.waiting_reason = "settling";
    inputs.version = "v9";
    return inputs;
  }

  JobBook jobs_{100, 100, [](bool) {}};
  WorkerRegistry workers_{"x"};
  ShardDirectory shards_{2};
  Generation generation_;
  v1::Job* job_ = nullptr;
  std::vector<std::string> ids_;
};

TEST_F(ClusterStatusOfTest, WithoutAGenerationEveryWorkerIsIdleAndTheJobWaits) {
  v1::ClusterStatus status = ClusterStatusOf(Inputs(), kT0);
  EXPECT_EQ(status.coordinator_version(), "v9");
  EXPECT_EQ(status.generation(), 0u);
  EXPECT_EQ(status.nodes_size(), 0);
  EXPECT_EQ(status.idle_workers_size(), 3);
  EXPECT_EQ(status.waiting_reason(), "settling");
  EXPECT_EQ(status.job().waiting_reason(), "settling");
  EXPECT_EQ(status.shards_size(), 1);
  EXPECT_EQ(status.expected_shards(), 2u);
}

TEST_F(ClusterStatusOfTest, NodesListTheirWorkersByLocalRankAndMarkStragglers) {
  generation_.active = true;
  generation_.number = 4;
  generation_.node_names = {"n0"};
  generation_.rendezvous_ids = {"job/g4/n0"};
  for (int i = 0; i < 2; ++i) {
    v1::Assignment assignment;
    assignment.set_node_rank(0);
    assignment.set_local_rank(1 - i);
    generation_.assignments[ids_[i]] = assignment;
    workers_.Find(ids_[i])->report.set_step_seconds(i == 0 ? 1.0 : 3.0);
  }
  v1::ClusterStatus status = ClusterStatusOf(Inputs(), kT0);
  EXPECT_EQ(status.generation(), 4u);
  ASSERT_EQ(status.nodes_size(), 1);
  ASSERT_EQ(status.nodes(0).workers_size(), 2);
  // Local rank 0 first: that is the second worker, the slow one.
  EXPECT_EQ(status.nodes(0).workers(0).worker_id(), ids_[1]);
  EXPECT_TRUE(status.nodes(0).workers(0).straggler());
  EXPECT_FALSE(status.nodes(0).workers(1).straggler());
  ASSERT_EQ(status.idle_workers_size(), 1);
  EXPECT_EQ(status.idle_workers(0).worker_id(), ids_[2]);
  EXPECT_EQ(status.job().waiting_reason(), "");  // A generation runs.
  EXPECT_EQ(status.waiting_reason(), "");
}

TEST_F(ClusterStatusOfTest, PausedAndFinishedJobs) {
  jobs_.Transition(*job_, v1::PAUSED, "paused: test", kT0);
  EXPECT_EQ(ClusterStatusOf(Inputs(), kT0).waiting_reason(),
            "job " + job_->job_id() + " is paused");
  jobs_.Finish(*job_, v1::STOPPED, "stopped", kT0);
  v1::ClusterStatus status = ClusterStatusOf(Inputs(), kT0);
  EXPECT_EQ(status.job().state(), v1::STOPPED);  // The newest job is still shown.
  EXPECT_EQ(status.waiting_reason(), "");
}

TEST(ClusterStatusOfEmptyTest, NoJobSubmitted) {
  JobBook jobs(100, 100, [](bool) {});
  WorkerRegistry workers("x");
  ShardDirectory shards(1);
  Generation generation;
  StatusInputs inputs{&jobs, &workers, &shards, &generation, "", "v", 1.5};
  EXPECT_EQ(ClusterStatusOf(inputs, kT0).waiting_reason(), "no job submitted");
  EXPECT_FALSE(ClusterStatusOf(inputs, kT0).has_job());
}

}  // namespace
}  // namespace tributary::coordinator
