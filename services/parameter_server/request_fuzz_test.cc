// The shard against hostile requests: a seeded mutation loop (common/testing/
// proto_mutator.h) over every request type the ParameterServer service takes, starting
// from the corpus in testdata/fuzz/<type>/ (valid requests for the job installed here).
// Every mutated request must be answered with a status, never a crash, a hang or an
// allocation beyond the bounds; afterwards the shard still trains. FUZZ_ITERATIONS
// sets the rounds per type (CI: the default); FUZZ_WRITE_CORPUS=DIR writes the seeds.
#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/proto_mutator.h"
#include "services/parameter_server/node_credential_book.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using tributary::testing::CorpusPath;
using tributary::testing::FuzzIterations;
using tributary::testing::ProtoMutator;
using tributary::testing::WriteSeed;

constexpr int64_t kElements = 128;  // Two partitions of 256 bytes.

v1::InitHeader Header() {
  return testing::MakeHeader(testing::MakeSpec(v1::SYNC, testing::Sgd(0.1f), 2), kElements, 1, 0);
}

std::vector<v1::PartitionValues> Initial() {
  return testing::InitialValues(Header(), std::vector<float>(kElements, 0.5f));
}

// A shard holding the job the corpus speaks of (again, if a mutated EndJob ended it).
void Install(ParameterShard& shard) {
  if (shard.Status().job_id() == "job-1" && !shard.Status().job_ended()) return;
  absl::StatusOr<v1::InitPartitionsResponse> installed = shard.Init(Header(), Initial());
  ASSERT_TRUE(installed.ok()) << installed.status();
}

TEST(RequestFuzzTest, WriteCorpusWhenAsked) {
  const char* dir = std::getenv("FUZZ_WRITE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "FUZZ_WRITE_CORPUS not set: the corpus is checked in";
  const v1::InitHeader header = Header();
  WriteSeed(dir, "init_header", "sync_two_nodes", header);
  WriteSeed(dir, "partition_values", "partition_0", Initial()[0]);
  WriteSeed(dir, "gradient_push", "node0_step0",
            testing::MakePush(header, 0, 0, 0, 0, std::vector<float>(kElements, 0.25f), 3));
  WriteSeed(
      dir, "gradient_push", "node1_step0_bf16",
      testing::MakePush(header, 0, 0, 1, 1, std::vector<float>(kElements, -1.0f), 2, v1::BFLOAT16));
  v1::BeginGenerationRequest begin;
  begin.set_job_id("job-1");
  begin.set_generation(1);
  begin.set_num_nodes(2);
  begin.set_resume_step(0);
  WriteSeed(dir, "begin_generation", "generation_1", begin);
  begin.set_fence(true);
  WriteSeed(dir, "begin_generation", "fence_1", begin);
  begin.set_fence(false);
  begin.set_generation(2);
  for (const char* digest : {"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
                             "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"}) {
    begin.add_node_credential_sha256(digest);
  }
  WriteSeed(dir, "begin_generation", "credentials_2", begin);
  v1::PullRequest pull;
  pull.set_job_id("job-1");
  pull.add_partition_ids(1);
  WriteSeed(dir, "pull", "partition_1", pull);
  v1::EndJobRequest end;
  end.set_job_id("job-1");
  WriteSeed(dir, "end_job", "job_1", end);
  v1::RestoreJobRequest restore;
  restore.set_job_id("job-2");
  *restore.mutable_job() = header.job();
  restore.set_from_job_id("job-1");
  restore.set_step(1);
  restore.set_num_nodes(2);
  WriteSeed(dir, "restore_job", "job_2_from_job_1", restore);
  restore.set_list_only(true);
  WriteSeed(dir, "restore_job", "list_job_1", restore);
}

template <typename T>
std::vector<T> Seeds(const std::string& type) {
  std::vector<T> seeds;
  for (auto& message : ProtoMutator::LoadCorpus(
           CorpusPath("services/parameter_server/testdata/fuzz/" + type), T())) {
    seeds.push_back(static_cast<const T&>(*message));
  }
  return seeds;
}

TEST(RequestFuzzTest, EveryRequestTypeIsAnsweredWithAStatus) {
  FLAGS_minloglevel = 3;  // Thousands of refusals would each be logged.
  ShardOptions options;
  options.shard_index = 0;
  options.checkpoint_dir = ::testing::TempDir() + "/fuzz_checkpoints";
  ParameterShard shard(options, nullptr);
  Install(shard);
  const auto pushes = Seeds<v1::GradientPush>("gradient_push");
  const auto headers = Seeds<v1::InitHeader>("init_header");
  const auto values = Seeds<v1::PartitionValues>("partition_values");
  const auto begins = Seeds<v1::BeginGenerationRequest>("begin_generation");
  const auto pulls = Seeds<v1::PullRequest>("pull");
  const auto ends = Seeds<v1::EndJobRequest>("end_job");
  const auto restores = Seeds<v1::RestoreJobRequest>("restore_job");
  ASSERT_FALSE(pushes.empty() || headers.empty() || values.empty() || begins.empty() ||
               pulls.empty() || ends.empty() || restores.empty());
  ProtoMutator mutator(20261125);
  testing::RecordingSink sink;
  NodeCredentialBook credentials;  // What a shard serving with a cluster secret checks.
  const int iterations = FuzzIterations(5000);
  int ok = 0, refused = 0;
  for (int i = 0; i < iterations; ++i) {
    Install(shard);
    auto tally = [&](const absl::Status& status) { status.ok() ? ++ok : ++refused; };
    // A push, the hot path.
    auto push = mutator.Mutate(pushes[i % pushes.size()]);
    const auto& claimed = static_cast<const v1::GradientPush&>(*push);
    tally(shard.Push(claimed, &sink).status());
    // Who may speak for the node a push claims (every call that speaks for a node, and
    // OpenDataPlane's tickets): the credential digests and the generation's ranks.
    tally(credentials.Check(claimed.job_id(), claimed.job_id(), claimed.generation(),
                            claimed.node_rank(), "fuzz"));
    tally(shard.CheckNode(claimed.job_id(), claimed.generation(), claimed.node_rank()));
    // An InitPartitions stream: a header, then values.
    if (i % 4 == 0) {
      std::unique_ptr<ParameterShard::InitSession> session = shard.StartInit();
      auto header = mutator.Mutate(headers[i % headers.size()]);
      absl::Status status = session->Header(static_cast<const v1::InitHeader&>(*header));
      if (status.ok()) {
        auto value = mutator.Mutate(values[i % values.size()]);
        status = session->Values(static_cast<v1::PartitionValues&>(*value));
      }
      if (status.ok()) status = session->Finish().status();
      tally(status);
    }
    if (i % 8 == 0) {
      auto begin = mutator.Mutate(begins[i % begins.size()]);
      const auto& request = static_cast<const v1::BeginGenerationRequest&>(*begin);
      tally(credentials.Note(request));
      tally(shard.BeginGeneration(request).status());
    }
    auto pull = mutator.Mutate(pulls[i % pulls.size()]);
    tally(shard.Pull(static_cast<const v1::PullRequest&>(*pull)).status());
    // GetShardStatus and Checkpoint read no request field: called among the mutated
    // requests, on whatever state those left.
    if (i % 16 == 0) {
      EXPECT_LE(shard.Status().partitions_size(), 2);
    }
    if (i % 100 == 0) tally(shard.Checkpoint().status());
    if (i % 50 == 0) {
      auto end = mutator.Mutate(ends[i % ends.size()]);
      tally(shard.EndJob(static_cast<const v1::EndJobRequest&>(*end)).status());
    }
    // RestoreJob reads checkpoint files: the mutations reach it less often.
    if (i % 50 == 25) {
      auto restore = mutator.Mutate(restores[i % restores.size()]);
      tally(shard.RestoreJob(static_cast<const v1::RestoreJobRequest&>(*restore)).status());
    }
  }
  EXPECT_GT(refused, 0) << "the mutations never reached a refusal";
  EXPECT_GT(ok, 0) << "the mutations never left a valid request";
  // The shard still works: a fresh job trains a step.
  ParameterShard fresh(ShardOptions{}, nullptr);
  Install(fresh);
  const v1::InitHeader header = Header();
  for (uint32_t node : {0u, 1u}) {
    for (uint32_t partition : {0u, 1u}) {
      ASSERT_TRUE(fresh
                      .Push(testing::MakePush(header, 0, 0, node, partition,
                                              std::vector<float>(kElements, 1.0f), 1),
                            &sink)
                      .ok());
    }
  }
  EXPECT_EQ(fresh.Status().step(), 1u);
  std::printf("%d requests answered OK, %d refused with a status\n", ok, refused);
}

}  // namespace
}  // namespace tributary::ps
