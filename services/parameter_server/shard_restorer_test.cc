// ShardRestorer over checkpoint files written into a temporary directory: which file
// each restore reads, and why a checkpoint is refused, without a shard.
#include "services/parameter_server/shard_restorer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "common/clock.h"
#include "common/job_spec.h"
#include "prometheus/registry.h"
#include "services/parameter_server/shard_metrics.h"
#include "services/parameter_server/shard_test_util.h"
#include "services/parameter_server/sink_table.h"

namespace tributary::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ShardRestorerTest : public ::testing::Test {
 protected:
  ShardRestorerTest() {
    spec_ = WithDefaults(testing::MakeSpec(v1::SYNC, testing::Sgd(0.1f), 2));
    header_ = testing::MakeHeader(spec_, 200, 2, 1);
  }

  // Shard 1's checkpoint of `job_id` at `step` (every value = step), written now.
  std::string Write(const std::string& job_id, uint64_t step, const v1::JobSpec& spec,
                    bool ended = false) {
    ShardCheckpoint checkpoint;
    CheckpointMeta& meta = checkpoint.meta;
    meta.set_job_id(job_id);
    *meta.mutable_job() = spec;
    *meta.mutable_plan() = header_.plan();
    meta.set_shard_index(1);
    meta.set_total_steps(100);
    meta.set_generation(3);
    meta.set_num_nodes(2);
    meta.set_step(step);
    meta.set_job_ended(ended);
    meta.set_written_unix_micros(++written_);  // The file name's time: in order.
    for (const v1::Partition& partition : header_.plan().partitions()) {
      if (partition.shard() != 1) continue;
      PartitionCheckpoint* info = meta.add_partitions();
      info->set_id(partition.id());
      info->set_length(partition.length());
      info->set_state_slots(0);
      info->set_step(step);
      auto values = std::make_shared<v1::PartitionValues>();
      values->set_partition_id(partition.id());
      values->set_dtype(v1::FLOAT32);
      values->set_step(step);
      std::vector<float> data(partition.length(), static_cast<float>(step));
      values->set_data(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
      PartitionData saved;
      saved.values = values;
      checkpoint.partitions.push_back(saved);
    }
    absl::StatusOr<WrittenCheckpoint> written = WriteCheckpoint(ShardDir(), checkpoint);
    EXPECT_TRUE(written.ok()) << written.status();
    return written.ok() ? written->path : std::string();
  }

  std::string ShardDir() const { return ShardDirectory(dir_, 1); }

  v1::RestoreJobRequest Resume(uint64_t step) const {
    v1::RestoreJobRequest request;
    request.set_job_id("job-2");
    request.set_from_job_id("job-1");
    request.set_step(step);
    request.set_num_nodes(4);
    request.set_num_shards(2);
    return request;
  }

  const std::string dir_ = testing::FreshTempDir("shard_restorer_test");
  int64_t written_ = 1'000'000;
  v1::JobSpec spec_;
  v1::InitHeader header_;
  FakeClock clock_;
  prometheus::Registry registry_;
  ShardMetrics metrics_{registry_};
  SinkTable sinks_{metrics_};
  ShardRestorer restorer_{[this](v1::TrainingMode mode) {
    AggregatorContext context;
    context.metrics = &metrics_;
    context.sinks = &sinks_;
    context.clock = &clock_;
    context.step_moved = [](ShardPartition&, uint64_t, uint64_t) {};
    return MakeAggregator(mode, context);
  }};
};

TEST_F(ShardRestorerTest, ListsAJobsStepsNewestFirstAndNoOthers) {
  Write("job-1", 10, spec_);
  Write("other", 15, spec_);
  Write("job-1", 20, spec_);
  Write("job-1", 30, spec_);
  EXPECT_THAT(restorer_.Steps(ShardDir(), "job-1", 1, 64), ElementsAre(30, 20, 10));
  EXPECT_THAT(restorer_.Steps(ShardDir(), "job-1", 1, 2), ElementsAre(30, 20));
  EXPECT_THAT(restorer_.Steps(ShardDir(), "job-1", 0, 64), ElementsAre());
}

TEST_F(ShardRestorerTest, FindsTheStepSkippingACorruptFileAndAnotherPlan) {
  const std::string good = Write("job-1", 40, spec_);
  const std::string bad = Write("job-1", 40, spec_);  // Newer, then damaged.
  {
    std::fstream file(bad, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x7f');
  }
  absl::StatusOr<LoadedCheckpoint> found = restorer_.OfStep(ShardDir(), "job-1", 1, 40);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path, good);
  const std::string other_plan = "not-the-plan";
  absl::StatusOr<LoadedCheckpoint> none =
      restorer_.OfStep(ShardDir(), "job-1", 1, 40, &other_plan);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no intact checkpoint of step 40"));
  EXPECT_THAT(none.status().message(), HasSubstr(ShardDir()));
}

TEST_F(ShardRestorerTest, AResumedJobTakesTheEarlierJobsValuesAsItsOwn) {
  const std::string path = Write("job-1", 50, spec_);
  absl::StatusOr<RestoredJob> restored =
      restorer_.ForResume(Resume(50), spec_, ShardDir(), 1, "RestoreJob");
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->path, path);
  EXPECT_EQ(restored->meta.job_id(), "job-2");
  EXPECT_EQ(restored->meta.generation(), 0u);
  EXPECT_EQ(restored->meta.num_nodes(), 4u);
  const ShardJob& job = *restored->job;
  EXPECT_EQ(job.job_id, "job-2");
  EXPECT_EQ(job.shard_index, 1u);
  ASSERT_FALSE(job.partitions.empty());
  EXPECT_EQ(testing::FloatsOf(*job.partitions[0]->values)[0], 50.0f);
}

TEST_F(ShardRestorerTest, AResumeSaysWhatDiffersFromTheEarlierJob) {
  Write("job-1", 60, spec_);
  v1::JobSpec other_bytes = spec_;
  other_bytes.set_partition_bytes(512);
  absl::StatusOr<RestoredJob> refused =
      restorer_.ForResume(Resume(60), other_bytes, ShardDir(), 1, "RestoreJob of job-2");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("RestoreJob of job-2: the checkpoint "));
  EXPECT_THAT(refused.status().message(), HasSubstr("partition_bytes 256, this job's 512"));

  v1::RestoreJobRequest three_shards = Resume(60);
  three_shards.set_num_shards(3);
  refused = restorer_.ForResume(three_shards, spec_, ShardDir(), 1, "RestoreJob");
  EXPECT_THAT(refused.status().message(), HasSubstr("2 PS shards, this job's 3"));

  v1::JobSpec adam = testing::MakeSpec(v1::SYNC, testing::Sgd(0.1f), 2);
  adam.mutable_optimizer()->set_type(v1::ADAM);
  adam = WithDefaults(adam);
  refused = restorer_.ForResume(Resume(60), adam, ShardDir(), 1, "RestoreJob");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("optimizer state slot"));

  refused = restorer_.ForResume(Resume(61), spec_, ShardDir(), 1, "RestoreJob");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
}

// A resumed job's plan is the earlier job's: CUT_AUTO takes its cut, another cut is
// refused before anything is installed, and a checkpoint stored without a cut was
// planned with the even one.
TEST_F(ShardRestorerTest, AResumeTakesTheEarlierJobsCutOrRefusesAnother) {
  v1::JobSpec layers = spec_;
  layers.set_partition_cut(v1::CUT_LAYERS);
  Write("job-1", 70, layers);
  v1::JobSpec automatic = spec_;
  automatic.set_partition_cut(v1::CUT_AUTO);
  absl::StatusOr<RestoredJob> restored =
      restorer_.ForResume(Resume(70), automatic, ShardDir(), 1, "RestoreJob");
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->meta.job().partition_cut(), v1::CUT_LAYERS);
  EXPECT_EQ(restored->job->spec.partition_cut(), v1::CUT_LAYERS);

  v1::JobSpec even = spec_;
  even.set_partition_cut(v1::CUT_EVEN);
  absl::StatusOr<RestoredJob> refused =
      restorer_.ForResume(Resume(70), even, ShardDir(), 1, "RestoreJob");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("partition_cut CUT_LAYERS, this job's CUT_EVEN"));

  v1::JobSpec stored_without = spec_;
  stored_without.clear_partition_cut();
  Write("job-1", 80, stored_without);
  refused = restorer_.ForResume(Resume(80), layers, ShardDir(), 1, "RestoreJob");
  EXPECT_THAT(refused.status().message(),
              HasSubstr("partition_cut CUT_EVEN, this job's CUT_LAYERS"));
  restored = restorer_.ForResume(Resume(80), automatic, ShardDir(), 1, "RestoreJob");
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->job->spec.partition_cut(), v1::CUT_EVEN);
}

TEST_F(ShardRestorerTest, StartUpRestoresTheNewestUnlessItIsAFinalOne) {
  Write("job-1", 70, spec_);
  absl::StatusOr<std::optional<RestoredJob>> restored = restorer_.AtStartup(dir_, 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ((*restored)->meta.step(), 70u);
  // The only shard directory there, when the index is not known yet.
  restored = restorer_.AtStartup(dir_, -1);
  ASSERT_TRUE(restored.ok() && restored->has_value());
  Write("job-1", 80, spec_, /*ended=*/true);
  restored = restorer_.AtStartup(dir_, 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_FALSE(restored->has_value());
  EXPECT_FALSE(restorer_.AtStartup(dir_, 0)->has_value());
}

TEST_F(ShardRestorerTest, ACheckpointThatDoesNotFitItsPlanIsDataLossNamingTheFile) {
  const std::string path = Write("job-1", 90, spec_);
  absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  read->meta.set_num_nodes(0);
  absl::StatusOr<RestoredJob> refused = restorer_.JobOf(path, *std::move(read));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace tributary::ps
