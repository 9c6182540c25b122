// A cluster outlives its jobs (issue 23): good, bad and good jobs on one long-lived
// cluster of the real binaries (workers that stay after a job, as with `tributary
// submit`, the Python client and the chart). The bad job fails the workers' model check;
// the job after it is judged on its own (it used to fail within a second with the bad
// job's error, until the workers were restarted), and each job's progress and history
// are its own from its first step (a new job's first point once was the last one's
// step 600 with accuracy 1.0).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tests/training/cluster_fixture.h"

namespace tributary::testing {
namespace {

constexpr uint64_t kEvalInterval = 100;

v1::JobSpec Good(uint64_t steps) {
  v1::JobSpec spec = SyntheticJob(32, steps);
  spec.set_nodes_min(2);
  spec.set_nodes_max(2);
  spec.set_eval_interval_steps(kEvalInterval);
  return spec;
}

// Every progress point and history step of `job` is of its own steps, and no point
// carries an accuracy before the job's first evaluation.
void ExpectOnlyItsOwnProgress(cli::LocalCluster& cluster, const v1::Job& job, uint64_t steps) {
  ASSERT_GT(job.progress_size(), 0);
  for (const v1::ProgressPoint& point : job.progress()) {
    EXPECT_LE(point.step(), steps) << job.job_id() << ": a point of another job";
    if (point.step() < kEvalInterval) {
      EXPECT_LT(point.test_accuracy(), 0.0f)
          << job.job_id() << " at step " << point.step() << ": an accuracy before it evaluated";
    }
  }
  v1::GetJobHistoryRequest request;
  request.set_job_id(job.job_id());
  v1::JobHistory history;
  grpc::ClientContext context;
  ASSERT_TRUE(v1::Coordinator::NewStub(cluster.coordinator_channel())
                  ->GetJobHistory(&context, request, &history)
                  .ok());
  ASSERT_GT(history.steps_size(), 0);
  EXPECT_EQ(history.steps(0).step(), 1u) << job.job_id() << ": the history starts at step 1";
  EXPECT_EQ(history.steps(history.steps_size() - 1).step(), steps);
  for (const v1::EvaluationPoint& evaluation : history.evaluations()) {
    EXPECT_LE(evaluation.step(), steps);
    EXPECT_EQ(evaluation.step() % kEvalInterval == 0 || evaluation.step() == steps, true)
        << "an evaluation at step " << evaluation.step() << " it did not make";
  }
}

TEST(LongLivedClusterTest, GoodBadGoodJobsAreEachJudgedOnTheirOwn) {
  ClusterShape shape;
  shape.worker_args = {"--noexit_after_job"};  // The same workers for every job.
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("good_bad_good", shape);
  ASSERT_NE(cluster, nullptr);

  const v1::Job first = RunToTheEnd(*cluster, Good(300));
  ASSERT_EQ(first.state(), v1::COMPLETED) << first.state_reason();
  ExpectOnlyItsOwnProgress(*cluster, first, 300);
  // The default cut, chosen for this job on CPU workers.
  EXPECT_EQ(first.spec().partition_cut(), v1::CUT_EVEN);

  // A model with 4 outputs for data of 10 classes: the workers' model check refuses it.
  v1::JobSpec bad_spec = Good(300);
  bad_spec.mutable_dataset()->set_synthetic_classes(10);
  const v1::Job bad = RunToTheEnd(*cluster, bad_spec);
  ASSERT_EQ(bad.state(), v1::FAILED) << bad.DebugString();
  const std::string bad_reason = bad.state_reason();

  // Twice: the cluster keeps judging each job on its own; the first asks for the layer
  // cut, which the next, with the default, does not inherit.
  for (uint64_t steps : {200, 150}) {
    v1::JobSpec spec = Good(steps);
    if (steps == 200) spec.set_partition_cut(v1::CUT_LAYERS);
    const v1::Job next = RunToTheEnd(*cluster, spec);
    EXPECT_EQ(next.state(), v1::COMPLETED)
        << next.state_reason() << "\n(the bad job failed with: " << bad_reason << ")";
    EXPECT_EQ(next.spec().partition_cut(), steps == 200 ? v1::CUT_LAYERS : v1::CUT_EVEN);
    EXPECT_EQ(next.step(), steps);
    EXPECT_GE(next.result().test_accuracy(), 0.0f);
    ExpectOnlyItsOwnProgress(*cluster, next, steps);
  }
}

}  // namespace
}  // namespace tributary::testing
