// A bounded chaos run: while a SYNC job trains on a real cluster (coordinator with its
// state on disk, 2 PS shards checkpointing every 10 steps, 2 workers), a worker, a PS
// shard and the coordinator are each killed with SIGKILL and started again at steps
// drawn from a seed, and a worker leaves and joins again. The job must complete every
// step, and its final parameters must be those of one replica training alone on the
// same global batches (within the 1e-5 of the other exactness tests: SYNC sums the same
// gradients, only the order of float additions differs).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/parameters.h"
#include "common/child_process.h"
#include "common/cluster_auth.h"
#include "tests/training/cluster_fixture.h"

namespace tributary::testing {
namespace {

TEST(ChaosTest, KillsAndAJoinLeaveTheParametersOfACleanRun) {
  ClusterShape shape;
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("chaos", shape);
  ASSERT_NE(cluster, nullptr);
  // Long enough that the job still runs at the last event: workers train on while the
  // coordinator restarts, at over 1,000 steps/s on the TCP data plane.
  const uint64_t kSteps = 12000;
  v1::JobSpec spec = SyntheticJob(32, kSteps);
  spec.set_nodes_min(1);
  spec.set_nodes_max(2);
  spec.set_checkpoint_interval_steps(10);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string job_id = submitted->job_id();
  // On a failure, what every process said last (the run directory goes with the test).
  struct DumpLogsOnFailure {
    cli::LocalCluster* cluster;
    ~DumpLogsOnFailure() {
      if (!::testing::Test::HasFailure()) return;
      for (ChildProcess* process : cluster->processes()) {
        std::printf("--- %s (%s):\n%s\n", process->name().c_str(),
                    process->ExitDescription().c_str(), process->LogTail(25).c_str());
      }
    }
  } dump{cluster.get()};

  // What happens, in an order and at steps drawn from the seed.
  std::mt19937_64 random(20261125);
  std::vector<std::string> events = {"worker-0", "ps-1", "coordinator", "leave"};
  std::shuffle(events.begin(), events.end(), random);
  uint64_t at = 0;
  for (const std::string& event : events) {
    at += 100 + random() % 200;
    absl::StatusOr<v1::Job> reached = WaitForJob(
        *cluster, job_id,
        [at](const v1::Job& job) {
          return (job.state() == v1::RUNNING && job.step() >= at) || Finished(job);
        },
        absl::Minutes(1));
    ASSERT_TRUE(reached.ok()) << event << " at step " << at << ": " << reached.status();
    ASSERT_EQ(reached->state(), v1::RUNNING) << "the job ended before " << event;
    std::printf("step %llu: %s\n", static_cast<unsigned long long>(reached->step()), event.c_str());
    if (event == "leave") {
      // The worker of node 1 leaves on its own (SIGTERM: it deregisters) and starts again.
      absl::Status left = cluster->KillAndRestart("worker-1", /*gracefully=*/true);
      ASSERT_TRUE(left.ok()) << left;
    } else {
      absl::Status restarted = cluster->KillAndRestart(event);
      ASSERT_TRUE(restarted.ok()) << event << ": " << restarted;
    }
  }

  absl::StatusOr<v1::Job> done = WaitForJob(*cluster, job_id, Finished, absl::Minutes(5));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->state_reason();
  EXPECT_EQ(done->step(), kSteps);
  EXPECT_GE(done->result().test_accuracy(), 0.0f) << "the final evaluation is kept";
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->step, kSteps);
  EXPECT_LE(MaxRelativeDifference(pulled->values, ReferenceParameters(spec, kSteps)), 1e-5);
}

// Rank 0 SIGKILLed after the last step, while it evaluates the final parameters (a
// model wide enough that the evaluation of 20,000 test samples takes a while), then
// started again: a new generation forms after the last step, rank 0 evaluates, and the
// job completes with its test accuracy (it used to complete with -1).
TEST(ChaosTest, KillingRankZeroAtTheEndKeepsTheFinalEvaluation) {
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("end", ClusterShape());
  ASSERT_NE(cluster, nullptr);
  const uint64_t kSteps = 60;
  v1::JobSpec spec = SyntheticJob(32, kSteps);
  spec.mutable_model()->clear_layer_sizes();
  for (uint32_t size : {32, 1024, 1024, 4}) spec.mutable_model()->add_layer_sizes(size);
  spec.mutable_dataset()->set_synthetic_test_samples(20000);
  spec.set_nodes_min(2);
  spec.set_nodes_max(2);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  absl::StatusOr<v1::Job> trained = WaitForJob(
      *cluster, submitted->job_id(),
      [&](const v1::Job& job) { return job.step() >= kSteps || Finished(job); },
      absl::Minutes(3));
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_EQ(trained->state(), v1::RUNNING) << "the job ended before rank 0 could be killed";
  // Which process is rank 0 (by its pid in ListWorkers).
  auto coordinator = v1::Coordinator::NewStub(cluster->coordinator_channel());
  v1::ListWorkersResponse workers;
  grpc::ClientContext list;
  ASSERT_TRUE(coordinator->ListWorkers(&list, v1::ListWorkersRequest(), &workers).ok());
  std::string rank0;
  for (const v1::WorkerInfo& worker : workers.workers()) {
    if (!worker.has_assignment() || worker.assignment().global_rank() != 0) continue;
    for (ChildProcess* process : cluster->processes()) {
      if (static_cast<uint32_t>(process->pid()) == worker.pid()) rank0 = process->name();
    }
  }
  ASSERT_FALSE(rank0.empty()) << "rank 0 not found among the processes";
  const absl::Status restarted = cluster->KillAndRestart(rank0);
  ASSERT_TRUE(restarted.ok()) << rank0 << ": " << restarted;
  absl::StatusOr<v1::Job> done =
      WaitForJob(*cluster, submitted->job_id(), Finished, absl::Minutes(3));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->state_reason();
  EXPECT_GE(done->generation(), 2u) << "rank 0 was killed after the job had completed";
  EXPECT_GE(done->result().test_accuracy(), 0.0f) << "the final evaluation was lost";
  EXPECT_EQ(done->step(), kSteps);
}

}  // namespace
}  // namespace tributary::testing
