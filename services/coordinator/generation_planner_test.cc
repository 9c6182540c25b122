#include "services/coordinator/generation_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Action = FormationDecision::Action;
const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

Candidate Cpu(const std::string& id, uint64_t sequence, const std::string& node) {
  Candidate candidate;
  candidate.worker_id = id;
  candidate.sequence = sequence;
  candidate.registration.set_node_name(node);
  v1::Device* device = candidate.registration.add_devices();
  device->set_kind(v1::CPU);
  device->set_index(-1);
  device->set_cpu_cores(4);
  return candidate;
}

v1::Job Job(uint32_t nodes_min, uint32_t nodes_max, v1::JobState state = v1::PENDING) {
  v1::Job job;
  job.set_job_id("job-1");
  job.set_state(state);
  v1::JobSpec spec;
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.set_nodes_min(nodes_min);
  spec.set_nodes_max(nodes_max);
  *job.mutable_spec() = WithDefaults(spec);
  return job;
}

FormationInputs Inputs(const v1::Job* job, std::vector<Candidate> candidates) {
  FormationInputs inputs;
  inputs.job = job;
  inputs.candidates = std::move(candidates);
  inputs.expected_shards = 1;
  inputs.next_generation = 5;
  return inputs;
}

class GenerationPlannerTest : public ::testing::Test {
 protected:
  GenerationPlanner planner_{absl::Seconds(2), absl::Seconds(1)};
};

TEST_F(GenerationPlannerTest, WaitsWithoutAJobOrWhilePaused) {
  EXPECT_EQ(planner_.Decide(Inputs(nullptr, {}), kT0).action, Action::kWait);
  EXPECT_THAT(planner_.waiting_reason(), HasSubstr("no active job"));
  const v1::Job paused = Job(1, 1, v1::PAUSED);
  EXPECT_EQ(planner_.Decide(Inputs(&paused, {Cpu("a", 1, "n0")}), kT0).action, Action::kWait);
  EXPECT_EQ(planner_.waiting_reason(), "job job-1 is paused");
}

TEST_F(GenerationPlannerTest, WaitsForShardsThenNodesMin) {
  const v1::Job job = Job(2, 2);
  FormationInputs inputs = Inputs(&job, {Cpu("a", 1, "n0")});
  inputs.missing_shards = {0};
  EXPECT_EQ(planner_.Decide(inputs, kT0).action, Action::kWait);
  EXPECT_THAT(planner_.waiting_reason(),
              HasSubstr("waiting for PS shards: 0 of 1 registered (missing shard index 0)"));
  inputs.missing_shards.clear();
  inputs.failed_workers = {"worker c (node n2) failed: no dataset"};
  EXPECT_EQ(planner_.Decide(inputs, kT0).action, Action::kWait);
  EXPECT_THAT(planner_.waiting_reason(),
              HasSubstr("waiting for nodes: 1 of nodes_min=2 node group(s) can be assigned"));
  EXPECT_THAT(planner_.waiting_reason(), HasSubstr("worker c (node n2) failed: no dataset"));
}

TEST_F(GenerationPlannerTest, SettlesForNodesMaxThenForms) {
  const v1::Job job = Job(1, 2);
  FormationInputs inputs = Inputs(&job, {Cpu("a", 1, "n0")});
  EXPECT_EQ(planner_.Decide(inputs, kT0).action, Action::kWait);
  EXPECT_THAT(planner_.waiting_reason(), HasSubstr("settling: 1 of nodes_max=2"));
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(1)).action, Action::kWait);
  FormationDecision formed = planner_.Decide(inputs, kT0 + absl::Seconds(2));
  EXPECT_EQ(formed.action, Action::kForm);
  EXPECT_THAT(formed.plan.node_names, ElementsAre("n0"));
  EXPECT_EQ(planner_.waiting_reason(), "forming generation 5");
  planner_.Formed();
  EXPECT_EQ(planner_.waiting_reason(), "");
}

TEST_F(GenerationPlannerTest, FormsAtOnceWithNodesMax) {
  const v1::Job job = Job(1, 2);
  EXPECT_EQ(planner_.Decide(Inputs(&job, {Cpu("a", 1, "n0"), Cpu("b", 2, "n1")}), kT0).action,
            Action::kForm);
}

TEST_F(GenerationPlannerTest, AFailedFormationIsRetriedAfterTheDelay) {
  const v1::Job job = Job(1, 1);
  FormationInputs inputs = Inputs(&job, {Cpu("a", 1, "n0")});
  planner_.FormationFailed("PS shard 0 at ps0:1: connection refused", kT0);
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Milliseconds(500)).action, Action::kWait);
  EXPECT_THAT(planner_.waiting_reason(), HasSubstr("connection refused (retrying in 0.5s)"));
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(1)).action, Action::kForm);
  // A new job does not wait for the last one's retry.
  planner_.FormationFailed("again", kT0 + absl::Seconds(1));
  planner_.JobSubmitted();
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(1)).action, Action::kForm);
}

TEST_F(GenerationPlannerTest, ScaleUpAfterTheSettleWindowThenFormsAtOnce) {
  const v1::Job job = Job(1, 2);
  Generation running;
  running.active = true;
  running.assignments["a"] = v1::Assignment();
  FormationInputs inputs = Inputs(&job, {Cpu("a", 1, "n0")});
  inputs.running = &running;
  EXPECT_EQ(planner_.Decide(inputs, kT0).action, Action::kWait);  // Does not grow.
  inputs.candidates.push_back(Cpu("b", 2, "n1"));
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(1)).action, Action::kWait);
  FormationDecision end = planner_.Decide(inputs, kT0 + absl::Seconds(3));
  EXPECT_EQ(end.action, Action::kEndForScaleUp);
  EXPECT_THAT(end.reason,
              HasSubstr("worker b (node n1) joined; re-forming with 2 workers on 2 node(s)"));
  inputs.running = nullptr;
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(3)).action, Action::kForm);
}

TEST_F(GenerationPlannerTest, NoScaleUpWhenAWorkerWouldBeDropped) {
  const v1::Job job = Job(1, 1);  // nodes_max = 1: b's node cannot join.
  Generation running;
  running.active = true;
  running.assignments["a"] = v1::Assignment();
  FormationInputs inputs = Inputs(&job, {Cpu("a", 1, "n0"), Cpu("b", 2, "n1")});
  inputs.running = &running;
  EXPECT_EQ(planner_.Decide(inputs, kT0).action, Action::kWait);
  EXPECT_EQ(planner_.Decide(inputs, kT0 + absl::Seconds(10)).action, Action::kWait);
}

v1::ShardStatus Status(uint32_t index, const std::string& job, uint64_t step, uint64_t gen) {
  v1::ShardStatus status;
  status.set_shard_index(index);
  status.set_job_id(job);
  status.set_step(step);
  status.set_generation(gen);
  return status;
}

TEST(ResumePointOfTest, TheLowestStepOfTheShardsHoldingTheJob) {
  absl::StatusOr<ResumePoint> point =
      ResumePointOf("job-1", {Status(0, "job-1", 40, 3), Status(1, "job-1", 30, 7)});
  ASSERT_TRUE(point.ok());
  EXPECT_EQ(point->step, 30u);
  EXPECT_EQ(point->newest_generation, 7u);
  EXPECT_THAT(point->holding, ElementsAre(0, 1));
}

TEST(ResumePointOfTest, AFreshJobStartsAtZero) {
  absl::StatusOr<ResumePoint> point =
      ResumePointOf("job-1", {Status(0, "", 0, 2), Status(1, "", 0, 0)});
  ASSERT_TRUE(point.ok());
  EXPECT_EQ(point->step, 0u);
  EXPECT_THAT(point->empty, ElementsAre(0, 1));
  // Shards at step 0 beside empty ones are consistent too.
  EXPECT_TRUE(ResumePointOf("job-1", {Status(0, "job-1", 0, 1), Status(1, "", 0, 0)}).ok());
}

TEST(ResumePointOfTest, TheHoldingShardsCutAndNoneWhenTheyDisagree) {
  v1::ShardStatus even = Status(0, "job-1", 40, 3);
  even.set_partition_cut(v1::CUT_EVEN);
  v1::ShardStatus layers = Status(1, "job-1", 40, 3);
  layers.set_partition_cut(v1::CUT_LAYERS);
  v1::ShardStatus silent = Status(1, "job-1", 40, 3);  // A shard older than the field.
  absl::StatusOr<ResumePoint> point = ResumePointOf("job-1", {even, silent});
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->cut, v1::CUT_EVEN);
  EXPECT_FALSE(ResumePointOf("job-1", {Status(0, "", 0, 2)})->cut.has_value());
  point = ResumePointOf("job-1", {even, layers});
  EXPECT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(point.status().message(),
              HasSubstr("under different partition cuts (CUT_EVEN and, on shard 1, CUT_LAYERS)"));
}

TEST(ResumePointOfTest, AnEmptyShardBesideProgressIsRefused) {
  absl::StatusOr<ResumePoint> point =
      ResumePointOf("job-1", {Status(0, "job-1", 40, 3), Status(1, "", 0, 0)});
  EXPECT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(point.status().message(),
              HasSubstr("PS shard(s) 1 hold no state of job job-1 while shard(s) 0 stand at "
                        "step 40"));
}

}  // namespace
}  // namespace tributary::coordinator
