// GenerationFormation against in-memory fake shards, without the coordinator: the
// four rounds of shard calls and what each case forms or why it does not.
#include "services/coordinator/generation_formation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/issued_credentials.h"
#include "services/coordinator/testing/fake_shards.h"

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class GenerationFormationTest : public ::testing::Test {
 protected:
  // Two shards, job-1 on 2 nodes; the coordinator's last generation is 4.
  FormationInput Input() {
    FormationInput input;
    input.job_id = "job-1";
    input.spec.set_mode(v1::SYNC);
    for (uint32_t i = 0; i < 2; ++i) {
      v1::ShardInfo& shard = input.shards.emplace_back();
      shard.set_shard_index(i);
      shard.set_address(absl::StrCat("ps-", i, ":7000"));
    }
    input.num_nodes = 2;
    input.reserve_generation = [this](uint64_t newest_seen) {
      reserved_with_.push_back(newest_seen);
      return std::max<uint64_t>(4, newest_seen) + 1;
    };
    input.note = [this](const std::string& event) { notes_.push_back(event); };
    return input;
  }

  FakeShards shards_;
  GenerationFormation formation_{shards_};
  std::vector<uint64_t> reserved_with_;
  std::vector<std::string> notes_;
};

TEST_F(GenerationFormationTest, AFreshJobStartsAtZeroAndTheWorkersInstallIt) {
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->number, 5u);
  EXPECT_EQ(formed->resume_step, 0u);
  EXPECT_TRUE(formed->from_scratch);
  EXPECT_THAT(formed->installing, ElementsAre(0, 1));
  EXPECT_THAT(reserved_with_, ElementsAre(0));
  // Both shards were told (and refused: they hold nothing yet); nobody was fenced.
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) {
    ASSERT_EQ(shards_[address].begun.size(), 1u);
    EXPECT_FALSE(shards_[address].begun[0].fence());
    EXPECT_EQ(shards_[address].begun[0].generation(), 5u);
  }
}

TEST_F(GenerationFormationTest, ShardsHoldingTheJobAreFencedThenBegunAtTheLowestStep) {
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) shards_.Install(address, "job-1", 7);
  shards_["ps-0:7000"].step = 12;
  shards_["ps-1:7000"].step = 11;
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->number, 8u);  // Past the newest generation the shards saw.
  EXPECT_THAT(reserved_with_, ElementsAre(7));
  EXPECT_EQ(formed->resume_step, 11u);
  EXPECT_FALSE(formed->from_scratch);
  EXPECT_THAT(formed->installing, IsEmpty());
  const auto& begun = shards_["ps-0:7000"].begun;
  ASSERT_EQ(begun.size(), 2u);
  EXPECT_TRUE(begun[0].fence());
  EXPECT_FALSE(begun[1].fence());
  EXPECT_EQ(begun[1].resume_step(), 11u);
  EXPECT_EQ(shards_["ps-0:7000"].step, 11u);  // Rolled back to the resume step.
}

// The cut of the state the shards hold comes back with the generation; a job that
// asked for another one forms nothing, and a job stored before cuts existed (none
// named: the even cut) forms on shards holding it under the even cut.
TEST_F(GenerationFormationTest, TheShardsCutComesBackAndAnotherAskedForIsRefused) {
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) {
    shards_.Install(address, "job-1", 7);
    shards_[address].step = 11;
    shards_[address].cut = v1::CUT_EVEN;
  }
  FormationInput stored_without_a_cut = Input();
  ASSERT_EQ(stored_without_a_cut.spec.partition_cut(), v1::PARTITION_CUT_UNSPECIFIED);
  absl::StatusOr<FormedGeneration> formed = formation_.Form(stored_without_a_cut);
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->held_cut, v1::CUT_EVEN);

  FormationInput layers = Input();
  layers.spec.set_partition_cut(v1::CUT_LAYERS);
  formed = formation_.Form(layers);
  EXPECT_EQ(formed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(formed.status().message(),
              HasSubstr("the PS shards hold job job-1 planned with partition_cut CUT_EVEN, its "
                        "spec says CUT_LAYERS"));

  FormationInput automatic = Input();
  automatic.spec.set_partition_cut(v1::CUT_AUTO);
  formed = formation_.Form(automatic);
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->held_cut, v1::CUT_EVEN);
}

TEST_F(GenerationFormationTest, TheResumeStepIsReadAfterTheFenceStopsLatePushes) {
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) shards_.Install(address, "job-1", 3);
  shards_["ps-0:7000"].step = 20;
  shards_["ps-1:7000"].step = 20;
  // The ended generation's members still push: every shard call lets both shards
  // complete a step, until a shard is fenced.
  shards_["ps-0:7000"].racing_steps = 1;
  shards_["ps-1:7000"].racing_steps = 1;
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_TRUE(formed.ok()) << formed.status();
  // The statuses said 21 and 22; the fences stopped the shards at 23 and 24, and the
  // steps read after them give 23, which shard 1 can roll back to (a resume step
  // from before the fence could not be).
  EXPECT_EQ(formed->resume_step, 23u);
  EXPECT_EQ(shards_["ps-0:7000"].step, 23u);
  EXPECT_EQ(shards_["ps-1:7000"].step, 23u);
  EXPECT_EQ(shards_["ps-1:7000"].racing_steps, 0u);
}

TEST_F(GenerationFormationTest, AShardHoldingAnotherJobIsToldToEndIt) {
  shards_.Install("ps-1:7000", "old-job", 2);
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_THAT(shards_["ps-1:7000"].ended, ElementsAre("old-job"));
  EXPECT_THAT(formed->installing, ElementsAre(0, 1));
}

TEST_F(GenerationFormationTest, AnUnreachableShardFormsNothingAndReservesNoNumber) {
  shards_["ps-1:7000"].reachable = false;
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_FALSE(formed.ok());
  EXPECT_THAT(formed.status().message(), HasSubstr("PS shard 1 at ps-1:7000"));
  EXPECT_THAT(reserved_with_, IsEmpty());
  EXPECT_THAT(shards_["ps-0:7000"].begun, IsEmpty());
}

TEST_F(GenerationFormationTest, HalfTheShardsHoldingAStepPastZeroIsRefused) {
  shards_.Install("ps-0:7000", "job-1", 2);
  shards_["ps-0:7000"].step = 9;
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_FALSE(formed.ok());
  EXPECT_EQ(formed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reserved_with_, IsEmpty());
}

TEST_F(GenerationFormationTest, ARefusedBeginNamesTheGenerationAndTheShard) {
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) shards_.Install(address, "job-1", 1);
  shards_["ps-0:7000"].step = 30;
  shards_["ps-1:7000"].step = 10;  // Shard 0 cannot roll back 20 steps.
  absl::StatusOr<FormedGeneration> formed = formation_.Form(Input());
  ASSERT_FALSE(formed.ok());
  EXPECT_THAT(formed.status().message(),
              HasSubstr("BeginGeneration(generation 5, resume step 10) on PS shard 0"));
  EXPECT_THAT(formed.status().message(), HasSubstr("cannot roll back"));
}

TEST_F(GenerationFormationTest, AResumedJobRestoresTheNewestStepEveryShardHolds) {
  shards_["ps-0:7000"].checkpoints["old"] = {100, 200, 300};
  shards_["ps-1:7000"].checkpoints["old"] = {100, 200};
  FormationInput input = Input();
  input.spec.set_resume_from("old");
  absl::StatusOr<FormedGeneration> formed = formation_.Form(input);
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->resume_step, 200u);
  ASSERT_EQ(shards_["ps-1:7000"].restored.size(), 1u);
  EXPECT_EQ(shards_["ps-1:7000"].restored[0].step(), 200u);
  EXPECT_THAT(notes_, ElementsAre(HasSubstr("resumes job old from its checkpoint of step 200")));
}

TEST_F(GenerationFormationTest, AResumedJobWithoutACommonCheckpointSaysWhatEachShardHolds) {
  shards_["ps-0:7000"].checkpoints["old"] = {300};
  shards_["ps-1:7000"].checkpoints["old"] = {200};
  FormationInput input = Input();
  input.spec.set_resume_from("old");
  absl::StatusOr<FormedGeneration> formed = formation_.Form(input);
  ASSERT_FALSE(formed.ok());
  EXPECT_EQ(formed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(formed.status().message(), HasSubstr("shard 0: 300; shard 1: 200"));
  EXPECT_THAT(notes_, IsEmpty());
}

TEST_F(GenerationFormationTest, TheShardsGetEveryNodesCredentialDigest) {
  for (const char* address : {"ps-0:7000", "ps-1:7000"}) shards_.Install(address, "job-1", 0);
  FormationInput input = Input();
  input.node_credential = [](uint64_t generation, uint32_t rank) {
    return absl::StrCat("secret-", generation, "-", rank);
  };
  absl::StatusOr<FormedGeneration> formed = formation_.Form(input);
  ASSERT_TRUE(formed.ok()) << formed.status();
  const v1::BeginGenerationRequest& begun = shards_["ps-1:7000"].begun.back();
  EXPECT_THAT(begun.node_credential_sha256(),
              ElementsAre(CredentialDigest("secret-5-0"), CredentialDigest("secret-5-1")));
}

}  // namespace
}  // namespace tributary::coordinator
