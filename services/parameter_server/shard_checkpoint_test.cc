// Checkpoints of a whole shard: write, "kill" (destroy the shard), restart from the
// directory and compare, bit for bit; corrupt the newest file; periodic and final
// checkpoints.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "services/parameter_server/checkpoint_file.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

using testing::FloatsOf;
using ::testing::HasSubstr;
using testing::InitialValues;
using testing::MakeHeader;
using testing::MakePush;
using testing::MakeSpec;
using testing::RecordingSink;

constexpr int64_t kElements = 192;  // Three partitions of 64 floats.

v1::OptimizerSpec Adam() {
  v1::OptimizerSpec adam;
  adam.set_type(v1::ADAM);
  adam.set_learning_rate(0.01f);
  return adam;
}

std::vector<float> Gradient(uint64_t step, uint32_t node) {
  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    grad[i] = 0.001f * static_cast<float>((i * 7 + step * 13 + node * 5) % 17) - 0.008f;
  }
  return grad;
}

// Runs `steps` SYNC steps with two nodes on every partition of the header's shard.
// The shard keeps the sink until the generation ends: pass one that outlives it when
// a BeginGeneration follows.
void Train(ParameterShard& shard, const v1::InitHeader& header, uint64_t first, uint64_t steps,
           uint64_t generation = 0, RecordingSink* kept = nullptr) {
  RecordingSink local;
  RecordingSink& sink = kept != nullptr ? *kept : local;
  for (uint64_t step = first; step < first + steps; ++step) {
    for (const v1::Partition& partition : header.plan().partitions()) {
      if (partition.shard() != header.shard_index()) continue;
      for (uint32_t node = 0; node < 2; ++node) {
        auto pushed = shard.Push(
            MakePush(header, generation, step, node, partition.id(), Gradient(step, node), 3),
            &sink);
        ASSERT_TRUE(pushed.ok()) << pushed.status();
      }
    }
  }
}

std::vector<std::string> AllValues(ParameterShard& shard, const std::string& job_id) {
  v1::PullRequest request;
  request.set_job_id(job_id);
  auto values = shard.Pull(request);
  EXPECT_TRUE(values.ok()) << values.status();
  std::vector<std::string> out;
  if (!values.ok()) return out;
  for (const auto& value : *values) {
    out.push_back(absl::StrCat(value->partition_id(), "/", value->version(), "/", value->step(),
                               "/", value->data()));
  }
  return out;
}

ShardOptions Options(const std::string& dir, int shard_index = -1) {
  ShardOptions options;
  options.checkpoint_dir = dir;
  options.shard_index = shard_index;
  // Checkpoints on demand as often as the tests ask (the limit has its own test).
  options.min_checkpoint_interval = absl::ZeroDuration();
  return options;
}

TEST(ShardCheckpointTest, RestartRestoresEverythingBitForBit) {
  const std::string dir = testing::FreshTempDir("restart");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 2, 1);
  std::vector<float> initial(kElements, 0.25f);
  std::vector<std::string> before;
  std::string path;
  {
    ParameterShard shard(Options(dir), nullptr);
    ASSERT_TRUE(shard.Init(header, InitialValues(header, initial)).ok());
    Train(shard, header, 0, 3);
    auto checkpoint = shard.Checkpoint();
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_EQ(checkpoint->step(), 3u);
    EXPECT_EQ(checkpoint->checksum().size(), 8u);
    EXPECT_THAT(checkpoint->path(), HasSubstr(dir + "/shard-1/ckpt-"));
    path = checkpoint->path();
    before = AllValues(shard, "job-1");
    EXPECT_EQ(shard.Status().last_checkpoint(), path);
  }  // The shard "dies".

  ParameterShard restarted(Options(dir), nullptr);
  auto restored = restarted.RestoreFromCheckpointDirectory();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, path);
  EXPECT_EQ(restarted.shard_index(), 1);  // Taken from the only shard directory.
  EXPECT_EQ(AllValues(restarted, "job-1"), before);
  EXPECT_EQ(restarted.Status().step(), 3u);

  // The nodes re-install the job: a no-op that names the checkpoint.
  auto init = restarted.Init(header, InitialValues(header, initial));
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_FALSE(init->created());
  EXPECT_EQ(init->restored_from(), path);
  EXPECT_EQ(init->step(), 3u);

  // Training on from the restored state equals training on without the restart,
  // which needs the optimizer state (Adam moments) restored exactly as well.
  ParameterShard reference(ShardOptions{}, nullptr);
  ASSERT_TRUE(reference.Init(header, InitialValues(header, initial)).ok());
  Train(reference, header, 0, 5);
  Train(restarted, header, 3, 2);
  EXPECT_EQ(AllValues(restarted, "job-1"), AllValues(reference, "job-1"));
}

// Buffer partitions (BatchNorm statistics) are checkpointed and restored like any
// other: their values are node 0's, and they stay buffer partitions after a restart.
TEST(ShardCheckpointTest, BufferPartitionsSurviveARestart) {
  const std::string dir = testing::FreshTempDir("buffers");
  const v1::InitHeader header =
      testing::MakeHeaderWithBuffers(MakeSpec(v1::SYNC, Adam(), 2), 64, 64, 1, 0);
  ASSERT_TRUE(header.plan().partitions(1).buffers());
  std::vector<float> pushed(128, 0.0f);
  for (int i = 64; i < 128; ++i) pushed[i] = 3.0f + static_cast<float>(i);
  std::vector<std::string> before;
  {
    ParameterShard shard(Options(dir, 0), nullptr);
    ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(128, 1))).ok());
    RecordingSink sink;
    for (uint32_t node = 0; node < 2; ++node) {
      for (uint32_t partition = 0; partition < 2; ++partition) {
        ASSERT_TRUE(shard.Push(MakePush(header, 0, 0, node, partition, pushed, 4), &sink).ok());
      }
    }
    ASSERT_TRUE(shard.Checkpoint().ok());
    before = AllValues(shard, "job-1");
  }
  ParameterShard restarted(Options(dir, 0), nullptr);
  ASSERT_TRUE(restarted.RestoreFromCheckpointDirectory().ok());
  EXPECT_EQ(AllValues(restarted, "job-1"), before);
  v1::PullRequest pull;
  pull.set_job_id("job-1");
  pull.add_partition_ids(1);
  EXPECT_EQ(FloatsOf(*(*restarted.Pull(pull))[0])[0], pushed[64]);
  // Still a buffer partition: node 0's next values are taken as they are.
  for (int i = 64; i < 128; ++i) pushed[i] = -1.5f;
  RecordingSink sink;
  for (uint32_t node = 0; node < 2; ++node) {
    ASSERT_TRUE(restarted.Push(MakePush(header, 0, 1, node, 1, pushed, 4), &sink).ok());
  }
  EXPECT_EQ(FloatsOf(*(*restarted.Pull(pull))[0])[5], -1.5f);
}

TEST(ShardCheckpointTest, CorruptNewestFileFallsBackToThePreviousOne) {
  const std::string dir = testing::FreshTempDir("fallback");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  std::vector<std::string> at_step2;
  std::string newest;
  {
    ParameterShard shard(Options(dir, 0), nullptr);
    ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
    Train(shard, header, 0, 2);
    ASSERT_TRUE(shard.Checkpoint().ok());
    at_step2 = AllValues(shard, "job-1");
    Train(shard, header, 2, 1);
    auto last = shard.Checkpoint();
    ASSERT_TRUE(last.ok());
    newest = last->path();
  }
  {
    std::fstream file(newest, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-100, std::ios::end);
    file.put('\x7f');
  }
  ParameterShard restarted(Options(dir, 0), nullptr);
  auto restored = restarted.RestoreFromCheckpointDirectory();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_NE(*restored, newest);
  EXPECT_EQ(AllValues(restarted, "job-1"), at_step2);
  EXPECT_EQ(restarted.Status().step(), 2u);
}

TEST(ShardCheckpointTest, PeriodicCheckpointsAtTheIntervalAndAConsistentStep) {
  const std::string dir = testing::FreshTempDir("periodic");
  v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
  spec.set_checkpoint_interval_steps(2);
  const v1::InitHeader header = MakeHeader(spec, kElements, 1, 0);
  ShardOptions options = Options(dir, 0);
  options.checkpoints_to_keep = 10;
  ParameterShard shard(options, nullptr);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
  for (uint64_t step = 0; step < 5; ++step) {
    Train(shard, header, step, 1);
    shard.FlushCheckpoints();  // Deterministic file names: no step races the writer.
  }
  const std::vector<std::string> files = ListCheckpoints(dir + "/shard-0");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_THAT(files[0], HasSubstr("-step-000000000004.tpc"));
  EXPECT_THAT(files[1], HasSubstr("-step-000000000002.tpc"));
  auto four = ReadCheckpoint(files[0]);
  ASSERT_TRUE(four.ok());
  for (const PartitionCheckpoint& partition : four->meta.partitions()) {
    EXPECT_EQ(partition.step(), 4u);
    EXPECT_EQ(partition.version(), 4u);
  }
  EXPECT_EQ(shard.metrics().checkpoints_ok.Value(), 2);
}

// The writer thread lags three steps behind training (held back by the test): it still
// writes exactly the interval's steps, each with the values of that step, and the push
// that would queue a third checkpoint waits for the writer instead of racing on.
TEST(ShardCheckpointTest, ALaggingWriterStillWritesEveryIntervalStep) {
  const std::string dir = testing::FreshTempDir("lagging");
  v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
  spec.set_checkpoint_interval_steps(1);
  const v1::InitHeader header = MakeHeader(spec, kElements, 1, 0);
  ShardOptions options = Options(dir, 0);
  options.checkpoints_to_keep = 10;
  absl::Notification writer_entered, release;
  options.before_periodic_checkpoint = [&](uint64_t step) {
    if (step != 1) return;
    writer_entered.Notify();
    release.WaitForNotification();
  };
  ParameterShard shard(options, nullptr);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
  std::map<uint64_t, std::vector<std::string>> at_step;
  Train(shard, header, 0, 1);
  writer_entered.WaitForNotification();  // Busy with step 1 until released.
  at_step[1] = AllValues(shard, "job-1");
  Train(shard, header, 1, 1);  // Step 2 queued: two in the backlog.
  at_step[2] = AllValues(shard, "job-1");
  std::atomic<bool> third_done{false};
  std::thread third([&] {
    Train(shard, header, 2, 1);  // Step 3 would be the third: its last push waits.
    third_done = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(third_done) << "the push that queued a third checkpoint did not wait";
  at_step[3] = AllValues(shard, "job-1");  // The step itself completed before the wait.
  release.Notify();
  third.join();
  shard.FlushCheckpoints();
  EXPECT_GE(shard.metrics().checkpoint_backlog_waits.Value(), 1);
  const std::vector<std::string> files = ListCheckpoints(dir + "/shard-0");  // Newest first.
  ASSERT_EQ(files.size(), 3u);
  for (size_t i = 0; i < files.size(); ++i) {
    const uint64_t step = 3 - i;
    EXPECT_THAT(files[i], HasSubstr(absl::StrFormat("-step-%012d.tpc", step)));
    auto read = ReadCheckpoint(files[i]);
    ASSERT_TRUE(read.ok()) << read.status();
    std::vector<std::string> saved;
    for (const PartitionData& partition : read->partitions) {
      saved.push_back(absl::StrCat(partition.values->partition_id(), "/",
                                   partition.values->version(), "/", partition.values->step(), "/",
                                   partition.values->data()));
    }
    EXPECT_EQ(saved, at_step[step]) << "checkpoint of step " << step;
  }
}

// Shard 1's writer is held back and has written nothing when shard 0 restarts from its
// checkpoint of step 2: shard 1 (at step 5) rewinds to its checkpoint of step 2 that is
// still waiting for the writer, from memory; its queued checkpoint of step 4, of the
// abandoned steps, is then skipped.
TEST(ShardCheckpointTest, AShardRewindsToACheckpointTheWriterHasNotWrittenYet) {
  const std::string dir = testing::FreshTempDir("rewind_unwritten");
  v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
  spec.set_checkpoint_interval_steps(2);
  const v1::InitHeader header0 = MakeHeader(spec, kElements, 2, 0);
  const v1::InitHeader header1 = MakeHeader(spec, kElements, 2, 1);
  const std::vector<float> initial(kElements, 1);
  absl::Notification release;
  ShardOptions options1 = Options(dir, 1);
  options1.before_periodic_checkpoint = [&](uint64_t) { release.WaitForNotification(); };
  auto shard0 = std::make_unique<ParameterShard>(Options(dir, 0), nullptr);
  ParameterShard shard1(options1, nullptr);
  struct Release {
    absl::Notification& release;
    ~Release() {
      if (!release.HasBeenNotified()) release.Notify();
    }
  } released_at_exit{release};
  ASSERT_TRUE(shard0->Init(header0, InitialValues(header0, initial)).ok());
  ASSERT_TRUE(shard1.Init(header1, InitialValues(header1, initial)).ok());
  std::vector<std::string> shard1_at_step2;
  RecordingSink sink0, sink1;
  for (uint64_t step = 0; step < 5; ++step) {
    if (step < 3) Train(*shard0, header0, step, 1, 0, &sink0);
    Train(shard1, header1, step, 1, 0, &sink1);
    if (step == 1) shard1_at_step2 = AllValues(shard1, "job-1");
  }
  shard0->FlushCheckpoints();
  ASSERT_EQ(shard1.Status().step(), 5u);
  ASSERT_TRUE(ListCheckpoints(ShardDirectory(dir, 1)).empty()) << "shard 1's writer wrote";
  shard0.reset();
  ParameterShard restarted(Options(dir, 0), nullptr);
  ASSERT_TRUE(restarted.RestoreFromCheckpointDirectory().ok());
  ASSERT_EQ(restarted.Status().step(), 2u);

  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(1);
  request.set_num_nodes(2);
  request.set_resume_step(2);
  auto begun = shard1.BeginGeneration(request);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(AllValues(shard1, "job-1"), shard1_at_step2);
  EXPECT_EQ(shard1.Status().step(), 2u);
  release.Notify();
  shard1.FlushCheckpoints();
  const std::vector<std::string> files = ListCheckpoints(ShardDirectory(dir, 1));
  ASSERT_EQ(files.size(), 1u) << "step 4 was abandoned: not written";
  EXPECT_THAT(files[0], HasSubstr("-step-000000000002.tpc"));
}

// A SYNC job on two shards; shard 0 dies at step 5 and restarts from its checkpoint of
// step 4. The coordinator resumes the job at step 4, beyond shard 1's one-step
// rollback: shard 1 rewinds to its own checkpoint of step 4, and from there both
// shards train on exactly as before.
TEST(ShardCheckpointTest, AShardFarAheadRewindsToItsCheckpointOfTheResumeStep) {
  const std::string dir = testing::FreshTempDir("rewind");
  v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
  spec.set_checkpoint_interval_steps(2);
  const v1::InitHeader header0 = MakeHeader(spec, kElements, 2, 0);
  const v1::InitHeader header1 = MakeHeader(spec, kElements, 2, 1);
  const std::vector<float> initial(kElements, 1);
  auto shard0 = std::make_unique<ParameterShard>(Options(dir, 0), nullptr);
  ParameterShard shard1(Options(dir, 1), nullptr);
  ASSERT_TRUE(shard0->Init(header0, InitialValues(header0, initial)).ok());
  ASSERT_TRUE(shard1.Init(header1, InitialValues(header1, initial)).ok());
  std::vector<std::string> shard1_at_step4;
  RecordingSink sink0, sink1;
  for (uint64_t step = 0; step < 5; ++step) {
    Train(*shard0, header0, step, 1, 0, &sink0);
    Train(shard1, header1, step, 1, 0, &sink1);
    shard0->FlushCheckpoints();
    shard1.FlushCheckpoints();
    if (step == 3) shard1_at_step4 = AllValues(shard1, "job-1");
  }
  Train(shard1, header1, 5, 1, 0, &sink1);  // Shard 1 even completed step 5 before 0 died.
  ASSERT_EQ(shard1.Status().step(), 6u);
  shard0.reset();

  ParameterShard restarted(Options(dir, 0), nullptr);
  ASSERT_TRUE(restarted.RestoreFromCheckpointDirectory().ok());
  ASSERT_EQ(restarted.Status().step(), 4u);

  v1::BeginGenerationRequest request;
  request.set_job_id("job-1");
  request.set_generation(1);
  request.set_num_nodes(2);
  request.set_resume_step(4);
  auto begun = shard1.BeginGeneration(request);
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->rolled_back(), 1u) << "shard 1's partition rewound";
  EXPECT_EQ(AllValues(shard1, "job-1"), shard1_at_step4) << "values and versions of step 4";
  EXPECT_EQ(shard1.Status().step(), 4u);
  ASSERT_TRUE(restarted.BeginGeneration(request).ok());

  // Steps 4 and 5 again give what an uninterrupted run gives (optimizer state included).
  RecordingSink sink0_again, sink1_again;
  Train(restarted, header0, 4, 2, 1, &sink0_again);
  Train(shard1, header1, 4, 2, 1, &sink1_again);
  ParameterShard reference0(ShardOptions{}, nullptr), reference1(ShardOptions{}, nullptr);
  ASSERT_TRUE(reference0.Init(header0, InitialValues(header0, initial)).ok());
  ASSERT_TRUE(reference1.Init(header1, InitialValues(header1, initial)).ok());
  Train(reference0, header0, 0, 6);
  Train(reference1, header1, 0, 6);
  EXPECT_EQ(AllValues(restarted, "job-1"), AllValues(reference0, "job-1"));
  EXPECT_EQ(AllValues(shard1, "job-1"), AllValues(reference1, "job-1"));

  // Without a checkpoint of the resume step the refusal says what was searched.
  request.set_generation(2);
  request.set_resume_step(1);
  auto refused = shard1.BeginGeneration(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("no intact checkpoint of step 1"));
  EXPECT_THAT(refused.status().message(), HasSubstr("shard-1"));
}

TEST(ShardCheckpointTest, SnapshotTakesThePreviousValuesOfPartitionsAlreadyAhead) {
  const std::string dir = testing::FreshTempDir("ahead");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  ParameterShard shard(Options(dir, 0), nullptr);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
  Train(shard, header, 0, 1);
  const std::vector<std::string> at_step1 = AllValues(shard, "job-1");
  RecordingSink sink;
  for (uint32_t node = 0; node < 2; ++node) {  // Partition 2 alone moves on to step 2.
    ASSERT_TRUE(shard.Push(MakePush(header, 0, 1, node, 2, Gradient(1, node), 3), &sink).ok());
  }
  auto checkpoint = shard.Checkpoint();
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->step(), 1u);
  ParameterShard restarted(Options(dir, 0), nullptr);
  ASSERT_TRUE(restarted.RestoreFromCheckpointDirectory().ok());
  EXPECT_EQ(AllValues(restarted, "job-1"), at_step1);
}

TEST(ShardCheckpointTest, EndJobWritesAFinalCheckpointThatIsNotRestored) {
  const std::string dir = testing::FreshTempDir("final");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  {
    ParameterShard shard(Options(dir, 0), nullptr);
    ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
    RecordingSink sink;  // EndJob ends the nodes' sinks: it must outlive the job.
    Train(shard, header, 0, 1, 0, &sink);
    v1::EndJobRequest request;
    request.set_job_id("job-2");
    EXPECT_EQ(shard.EndJob(request).status().code(), absl::StatusCode::kNotFound);
    request.set_job_id("job-1");
    auto ended = shard.EndJob(request);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_THAT(ended->final_checkpoint(), HasSubstr("step-000000000001"));
    EXPECT_GE(shard.Status().checkpoint_age_seconds(), 0);
    EXPECT_GT(shard.metrics().last_checkpoint_timestamp_seconds.Value(), 0);
    // The ended job is still shown (its final parameters can be pulled), marked ended.
    EXPECT_EQ(shard.Status().job_id(), "job-1");
    EXPECT_TRUE(shard.Status().job_ended());
    const std::vector<std::string> final_values = AllValues(shard, "job-1");
    // The shard is free for the next job.
    const v1::InitHeader next = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), 64, 1, 0, "job-2");
    auto init = shard.Init(next, InitialValues(next, std::vector<float>(64, 1)));
    ASSERT_TRUE(init.ok()) << init.status();
    EXPECT_TRUE(init->created());
    // The new job has written no checkpoint: the last job's is not its own (an alert
    // on checkpoint age would otherwise count from the previous job's end).
    EXPECT_EQ(shard.Status().checkpoint_age_seconds(), -1.0);
    EXPECT_EQ(shard.metrics().checkpoint_age_seconds.Value(), -1);
    EXPECT_EQ(shard.metrics().last_checkpoint_timestamp_seconds.Value(), 0);
    // The ended job's final parameters still come out (from its final checkpoint).
    EXPECT_EQ(AllValues(shard, "job-1"), final_values);
  }
  ParameterShard restarted(Options(dir, 0), nullptr);
  auto restored = restarted.RestoreFromCheckpointDirectory();
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, "");
  EXPECT_TRUE(restarted.Status().job_id().empty());
  // And after a restart, for `tributary export`; a job never seen is still refused.
  v1::PullRequest pull;
  pull.set_job_id("job-1");
  auto saved = restarted.Pull(pull);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->size(), 3u);
  EXPECT_EQ((*saved)[0]->step(), 1u);
  pull.set_job_id("job-9");
  EXPECT_EQ(restarted.Pull(pull).status().code(), absl::StatusCode::kFailedPrecondition);
  // Ids that are not job ids are refused like unknown jobs.
  for (const std::string& bad :
       {std::string("../job-1"), std::string(), std::string(300, 'j')}) {
    pull.set_job_id(bad);
    EXPECT_EQ(restarted.Pull(pull).status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

// A new job that resumes an ended one (JobSpec.resume_from): the shard lists the steps
// it holds checkpoints of, installs the chosen one under the new job's id and spec,
// and training on gives what training the old job on would have.
TEST(ShardCheckpointTest, ANewJobResumesAnEndedJobsCheckpoint) {
  const std::string dir = testing::FreshTempDir("resume");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  const std::vector<float> initial(kElements, 0.5f);
  ParameterShard shard(Options(dir, 0), nullptr);
  RecordingSink sink;
  ASSERT_TRUE(shard.Init(header, InitialValues(header, initial)).ok());
  Train(shard, header, 0, 2, 0, &sink);
  ASSERT_TRUE(shard.Checkpoint().ok());  // Step 2.
  Train(shard, header, 2, 2, 0, &sink);
  v1::EndJobRequest end;
  end.set_job_id("job-1");
  ASSERT_TRUE(shard.EndJob(end).ok());  // Final checkpoint, step 4.

  v1::RestoreJobRequest request;
  request.set_job_id("job-2");
  *request.mutable_job() = header.job();
  request.mutable_job()->set_resume_from("job-1");
  request.set_from_job_id("job-1");
  request.set_list_only(true);
  absl::StatusOr<v1::RestoreJobResponse> listed = shard.RestoreJob(request);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(listed->steps(), ::testing::ElementsAre(4u, 2u));
  EXPECT_TRUE(shard.Status().job_ended()) << "listing installs nothing";

  request.set_list_only(false);
  request.set_step(3);
  EXPECT_EQ(shard.RestoreJob(request).status().code(), absl::StatusCode::kNotFound);
  request.set_step(2);
  absl::StatusOr<v1::RestoreJobResponse> restored = shard.RestoreJob(request);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->step(), 2u);
  EXPECT_THAT(restored->restored_from(), HasSubstr("step-000000000002"));
  EXPECT_EQ(shard.Status().job_id(), "job-2");
  EXPECT_EQ(shard.Status().step(), 2u);
  EXPECT_TRUE(shard.RestoreJob(request).ok()) << "asked again: already done";
  // Listed again (another shard's restore failed and the coordinator retries): the
  // one step it holds, so that every shard can agree on it.
  request.set_list_only(true);
  listed = shard.RestoreJob(request);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(listed->steps(), ::testing::ElementsAre(2u));
  EXPECT_EQ(shard.Status().step(), 2u);
  request.set_list_only(false);
  request.set_step(4);
  EXPECT_EQ(shard.RestoreJob(request).status().code(), absl::StatusCode::kFailedPrecondition);

  // The workers' InitPartitions of the new job finds it installed; two more steps equal
  // four steps of the old job, Adam's moments included.
  v1::InitHeader next = header;
  next.set_job_id("job-2");
  auto init = shard.Init(next, InitialValues(next, initial));
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_FALSE(init->created());
  EXPECT_EQ(init->step(), 2u);
  Train(shard, next, 2, 2, 0, &sink);
  ParameterShard reference(ShardOptions{}, nullptr);
  ASSERT_TRUE(reference.Init(header, InitialValues(header, initial)).ok());
  Train(reference, header, 0, 4);
  std::vector<std::string> resumed = AllValues(shard, "job-2");
  std::vector<std::string> expected = AllValues(reference, "job-1");
  ASSERT_EQ(resumed.size(), expected.size());
  for (size_t i = 0; i < resumed.size(); ++i) {
    // Same partition, version, step and bytes (the version counts the old job's too).
    EXPECT_EQ(resumed[i], expected[i]) << "partition entry " << i;
  }
}

TEST(ShardCheckpointTest, ResumingNeedsTheSameOptimizerStateAndValidIds) {
  const std::string dir = testing::FreshTempDir("resume_refused");
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  ParameterShard shard(Options(dir, 0), nullptr);
  RecordingSink sink;
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
  Train(shard, header, 0, 1, 0, &sink);
  v1::EndJobRequest end;
  end.set_job_id("job-1");
  ASSERT_TRUE(shard.EndJob(end).ok());
  v1::RestoreJobRequest request;
  request.set_job_id("job-2");
  *request.mutable_job() = MakeSpec(v1::SYNC, testing::Sgd(0.1f), 2);  // No state.
  request.set_from_job_id("job-1");
  request.set_step(1);
  absl::StatusOr<v1::RestoreJobResponse> refused = shard.RestoreJob(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("holds 2 optimizer state slot(s)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("this job's PS optimizer SGD needs 0"));
  // A checkpoint whose plan this job's workers would not make: refused naming both.
  struct Case {
    std::function<void(v1::RestoreJobRequest*)> change;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {[](v1::RestoreJobRequest* r) { r->mutable_job()->mutable_model()->set_name("logreg"); },
            "is of a job with model"},
           {[](v1::RestoreJobRequest* r) { r->mutable_job()->set_partition_bytes(512); },
            "is of a job with partition_bytes 256, this job's 512"},
           {[](v1::RestoreJobRequest* r) { r->set_num_shards(2); },
            "is of a job with 1 PS shards, this job's 2"}}) {
    v1::RestoreJobRequest other = request;
    *other.mutable_job() = header.job();
    c.change(&other);
    absl::StatusOr<v1::RestoreJobResponse> mismatched = shard.RestoreJob(other);
    EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kFailedPrecondition) << c.says;
    EXPECT_THAT(mismatched.status().message(), HasSubstr(c.says));
    EXPECT_TRUE(shard.Status().job_ended()) << "nothing installed: " << c.says;
  }
  request.set_from_job_id("../job-1");
  EXPECT_EQ(shard.RestoreJob(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_from_job_id("job-9");
  *request.mutable_job() = header.job();
  EXPECT_EQ(shard.RestoreJob(request).status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardCheckpointTest, OnDemandCheckpointsAreRateLimitedAndIdempotent) {
  const std::string dir = testing::FreshTempDir("on_demand");
  FakeClock clock;
  ShardOptions options = Options(dir, 0);
  options.clock = &clock;
  options.min_checkpoint_interval = absl::Seconds(5);
  ParameterShard shard(options, nullptr);
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), kElements, 1, 0);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1))).ok());
  Train(shard, header, 0, 1);
  auto first = shard.Checkpoint();
  ASSERT_TRUE(first.ok()) << first.status();
  // The same step again: the same file, nothing new written, however often.
  for (int i = 0; i < 20; ++i) {
    auto again = shard.Checkpoint();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->path(), first->path());
  }
  EXPECT_EQ(ListCheckpoints(ShardDirectory(dir, 0)).size(), 1u);
  // A new step within the interval is refused, saying when to retry.
  Train(shard, header, 1, 1);
  auto soon = shard.Checkpoint();
  EXPECT_EQ(soon.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(soon.status().message(), HasSubstr("try again in"));
  clock.Advance(absl::Seconds(5));
  auto later = shard.Checkpoint();
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->step(), 2u);
  EXPECT_NE(later->path(), first->path());
}

TEST(ShardCheckpointTest, AJobsCheckpointDirStaysUnderTheRoot) {
  const std::string root = testing::FreshTempDir("ckpt_root");
  const std::string outside = testing::FreshTempDir("ckpt_outside");
  for (const std::string& bad :
       {std::string("../../x"), std::string("a/../../b"), outside, std::string("/tmp/anything")}) {
    ParameterShard shard(Options(root, 0), nullptr);
    v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
    spec.set_checkpoint_dir(bad);
    const v1::InitHeader header = MakeHeader(spec, 64, 1, 0);
    auto refused = shard.Init(header, InitialValues(header, std::vector<float>(64, 1)));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr(bad));
    if (absl::StrContains(bad, "..")) {
      // Refused with the job spec itself (as SubmitJob refuses it).
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
      EXPECT_THAT(refused.status().message(), HasSubstr("'..' is not allowed"));
    } else {
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
      EXPECT_THAT(refused.status().message(), HasSubstr("--checkpoint_root"));
    }
    EXPECT_TRUE(shard.Status().job_id().empty()) << "a refused job is not installed";
  }
  // A relative directory is taken from the root, and the checkpoint goes there.
  ParameterShard shard(Options(root, 0), nullptr);
  v1::JobSpec spec = MakeSpec(v1::SYNC, Adam(), 2);
  spec.set_checkpoint_dir("job-own");
  const v1::InitHeader header = MakeHeader(spec, 64, 1, 0);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(64, 1))).ok());
  auto written = shard.Checkpoint();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(written->path(), HasSubstr("/job-own/shard-0/"));
  // With no directory at all, a job may not name one.
  ParameterShard bare(ShardOptions{}, nullptr);
  auto no_root = bare.Init(header, InitialValues(header, std::vector<float>(64, 1)));
  EXPECT_EQ(no_root.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_root.status().message(), HasSubstr("no --checkpoint_root"));
}

TEST(ShardCheckpointTest, CheckpointNeedsAJobAndADirectory) {
  ParameterShard shard(ShardOptions{}, nullptr);
  EXPECT_EQ(shard.Checkpoint().status().code(), absl::StatusCode::kFailedPrecondition);
  const v1::InitHeader header = MakeHeader(MakeSpec(v1::SYNC, Adam(), 2), 64, 1, 0);
  ASSERT_TRUE(shard.Init(header, InitialValues(header, std::vector<float>(64, 1))).ok());
  auto no_dir = shard.Checkpoint();
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_dir.status().message(), HasSubstr("no checkpoint directory"));
  EXPECT_EQ(shard.Status().checkpoint_age_seconds(), -1.0);
}

}  // namespace
}  // namespace tributary::ps
