// TorchScript models through the whole system as separate processes: the file goes up
// to the coordinator, the workers fetch it, LibTorch replicas train it, and SYNC
// training gives, step for step, the parameters of one replica of the same file with
// the same global batch, at several world sizes and an uneven split. Buffers
// (BatchNorm) follow node 0's first replica and come back out with the export; a model
// that does not fit its data fails the job before training, naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cli/model_files.h"
#include "cli/parameters.h"
#include "common/job_spec.h"
#include "common/sha256.h"
#include "tests/training/cluster_fixture.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

namespace tributary::testing {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const std::string> ModelFile(const std::string& name) {
  auto bytes = engine::ReadModelFile("worker/engine/testdata/" + name, 1 << 20);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::make_shared<const std::string>();
}

// 8 features and 3 classes: what the test modules take.
v1::JobSpec TorchScriptJob(const std::string& file, uint32_t batch, uint64_t steps,
                           uint32_t replicas, uint32_t nodes) {
  v1::JobSpec spec;
  spec.set_name("torchscript");
  spec.mutable_model()->set_name(kTorchScriptModel);
  spec.mutable_model()->mutable_torchscript()->set_file_name(file);
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*ModelFile(file)));
  v1::DatasetSpec& data = *spec.mutable_dataset();
  data.set_format(v1::SYNTHETIC);
  data.set_synthetic_features(8);
  data.set_synthetic_classes(3);
  data.set_synthetic_train_samples(530);  // 10 batches of 50 and a short one of 30.
  data.set_synthetic_test_samples(200);
  spec.set_global_batch_size(batch);
  spec.set_max_steps(steps);
  spec.set_epochs(0);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  spec.set_replicas_per_worker(replicas);
  spec.set_nodes_min(nodes);
  spec.set_partition_bytes(1024);  // Several partitions over both shards.
  spec.set_seed(5);
  return WithDefaults(spec);
}

absl::Status Upload(cli::LocalCluster& cluster, const v1::JobSpec& spec) {
  auto stub = v1::Coordinator::NewStub(cluster.coordinator_channel());
  const v1::TorchScriptFile& file = spec.model().torchscript();
  absl::StatusOr<v1::UploadModelResponse> uploaded =
      cli::UploadModelFile(*stub, file, *ModelFile(file.file_name()), nullptr);
  return uploaded.status();
}

std::vector<float> Reference(const v1::JobSpec& spec, uint64_t steps) {
  engine::TrainerOptions options;
  options.replicas = 1;
  options.torchscript_bytes = ModelFile(spec.model().torchscript().file_name());
  auto trainer = engine::LocalTrainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  for (uint64_t i = 0; i < steps; ++i) EXPECT_TRUE((*trainer)->Step().ok());
  return (*trainer)->parameters();
}

v1::Job RunJob(cli::LocalCluster& cluster, const v1::JobSpec& spec) {
  absl::Status uploaded = Upload(cluster, spec);
  EXPECT_TRUE(uploaded.ok()) << uploaded;
  return RunToTheEnd(cluster, spec);
}

struct Shape {
  const char* name;
  int workers;
  int nodes;  // 0 = one per worker.
  uint32_t replicas;
  uint32_t batch;
};

TEST(TorchScriptTrainingTest, SyncEqualsOneReplicaOfTheSameFileAtSeveralWorldSizes) {
  ASSERT_TRUE(engine::BuiltWithTorch()) << engine::TorchDescription();
  // 2 nodes x 2 replicas; one Gloo node of 2 processes x 3 replicas with an uneven
  // batch (50 over 6: 9,9,8,8,8,8) and a short last batch; 3 nodes x 1 replica.
  for (const Shape& shape : {Shape{"two_nodes", 2, 0, 2, 64}, Shape{"gloo_node", 2, 1, 3, 50},
                             Shape{"three_nodes", 3, 0, 1, 31}}) {
    SCOPED_TRACE(shape.name);
    ClusterShape cluster_shape;
    cluster_shape.ps_shards = 2;
    cluster_shape.workers = shape.workers;
    cluster_shape.nodes = shape.nodes;
    auto cluster = StartCluster(std::string("torchscript_") + shape.name, cluster_shape);
    const int nodes = shape.nodes > 0 ? shape.nodes : shape.workers;
    const uint64_t steps = 14;  // Past the short last batch of the first epoch.
    const v1::JobSpec spec = TorchScriptJob("tiny_mlp.pt", shape.batch, steps, shape.replicas,
                                            static_cast<uint32_t>(nodes));
    const v1::Job job = RunJob(*cluster, spec);
    ASSERT_EQ(job.state(), v1::COMPLETED) << job.state_reason();
    EXPECT_EQ(job.step(), steps);
    absl::StatusOr<cli::PulledParameters> pulled =
        cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    const std::vector<float> expected = Reference(spec, steps);
    ASSERT_EQ(pulled->values.size(), expected.size());
    EXPECT_LE(MaxRelativeDifference(pulled->values, expected), 1e-5);
    // Training moved the parameters: comparing two untouched buffers would prove nothing.
    EXPECT_GT(MaxRelativeDifference(pulled->values, Reference(spec, 0)), 1e-3);
  }
}

// A model with its own per-token loss on a token stream: the PS divides the nodes'
// gradient sums by the global batch's token count, so SYNC at 2 nodes x 2 replicas
// trains to the parameters of one replica of the same file; the model's metrics and
// test loss reach the job (GetJob's result and progress, GetJobHistory).
// The token-LM test job: token_lm.pt on the 50 ids of tokens_u2.npy (12 windows of
// 4), 2 nodes x 2 replicas, batch 8, plain SGD at a constant rate: its step scales
// with the gradient, so a wrong divisor (samples instead of tokens) shows at once
// (Adam would hide it), and a resumed job's rate is the one it would have had.
v1::JobSpec TokenJob(uint64_t steps) {
  v1::JobSpec spec = TorchScriptJob("token_lm.pt", 8, steps, 2, 2);
  char cwd[4096];
  const std::string base = getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : ".";
  const std::string tokens = base + "/worker/engine/testdata/npy/tokens_u2.npy";
  spec.mutable_dataset()->Clear();
  spec.mutable_dataset()->set_format(v1::TOKENS);
  spec.mutable_dataset()->set_train_path(tokens);
  spec.mutable_dataset()->set_test_path(tokens);
  spec.mutable_dataset()->set_seq_len(4);
  spec.set_eval_interval_steps(5);
  spec.mutable_optimizer()->set_type(v1::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  spec.mutable_optimizer()->mutable_schedule()->set_kind(v1::CONSTANT);
  return WithDefaults(spec);
}

TEST(TorchScriptTrainingTest, OwnPerTokenLossSyncEqualsOneReplicaAndMetricsReachTheJob) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;
  auto cluster = StartCluster("torchscript_tokens", shape);
  const uint64_t steps = 10;
  const v1::JobSpec spec = TokenJob(steps);
  const v1::Job job = RunJob(*cluster, spec);
  ASSERT_EQ(job.state(), v1::COMPLETED) << job.state_reason();
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  const std::vector<float> expected = Reference(spec, steps);
  ASSERT_EQ(pulled->values.size(), expected.size());
  EXPECT_LE(MaxRelativeDifference(pulled->values, expected), 1e-5);
  EXPECT_GT(MaxRelativeDifference(pulled->values, Reference(spec, 0)), 1e-3);

  // No accuracy (its own loss), its test loss per token, and its named metric.
  EXPECT_LT(job.result().test_accuracy(), 0.0f);
  EXPECT_GT(job.result().test_loss(), 0.0f);
  EXPECT_LT(job.result().test_loss(), std::log(64.0f));
  ASSERT_EQ(job.result().metrics().count("token_accuracy"), 1u);
  const double accuracy = job.result().metrics().at("token_accuracy");
  EXPECT_GE(accuracy, 0.0);
  EXPECT_LE(accuracy, 1.0);
  ASSERT_GT(job.progress_size(), 0);
  const v1::ProgressPoint& last = job.progress(job.progress_size() - 1);
  EXPECT_EQ(last.metrics().count("token_accuracy"), 1u);
  EXPECT_FLOAT_EQ(last.test_loss(), job.result().test_loss());
  v1::GetJobHistoryRequest request;
  request.set_job_id(job.job_id());
  v1::JobHistory history;
  grpc::ClientContext context;
  ASSERT_TRUE(v1::Coordinator::NewStub(cluster->coordinator_channel())
                  ->GetJobHistory(&context, request, &history)
                  .ok());
  ASSERT_EQ(history.evaluations_size(), 2);  // Steps 5 and 10.
  for (const v1::EvaluationPoint& evaluation : history.evaluations()) {
    EXPECT_EQ(evaluation.test_accuracy(), -1.0f);
    EXPECT_EQ(evaluation.metrics().count("token_accuracy"), 1u);
  }
  EXPECT_DOUBLE_EQ(history.evaluations(1).metrics().at("token_accuracy"), accuracy);
}

// A token job resumed from another's checkpoint goes on over the same windows: 6 steps,
// then a job resuming it to step 10 ends where 10 uninterrupted steps end (the step,
// its windows and the optimizer state come from the checkpoint and the seed).
TEST(TorchScriptTrainingTest, ATokenJobResumesFromItsCheckpointOnTheSameWindows) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;
  shape.worker_args = {"--noexit_after_job"};  // The same workers for both jobs.
  auto cluster = StartCluster("torchscript_tokens_resume", shape);
  v1::JobSpec first_spec = TokenJob(6);
  first_spec.set_checkpoint_interval_steps(3);
  const v1::Job first = RunJob(*cluster, first_spec);
  ASSERT_EQ(first.state(), v1::COMPLETED) << first.state_reason();

  v1::JobSpec resumed_spec = TokenJob(10);
  resumed_spec.set_resume_from(first.job_id());
  const v1::Job resumed = RunJob(*cluster, resumed_spec);
  ASSERT_EQ(resumed.state(), v1::COMPLETED) << resumed.state_reason();
  EXPECT_EQ(resumed.step(), 10u);
  ASSERT_GT(resumed.progress_size(), 0);
  EXPECT_GT(resumed.progress(0).step(), 6u) << "it began where the first job ended";
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  const std::vector<float> expected = Reference(TokenJob(10), 10);
  ASSERT_EQ(pulled->values.size(), expected.size());
  EXPECT_LE(MaxRelativeDifference(pulled->values, expected), 1e-5);
  // Ten steps are not six: the resumed job trained.
  EXPECT_GT(MaxRelativeDifference(pulled->values, Reference(TokenJob(6), 6)), 1e-3);
}

TEST(TorchScriptTrainingTest, BuffersFollowNodeZeroAndComeBackOutInTheExport) {
  ClusterShape shape;
  shape.ps_shards = 2;
  shape.workers = 2;
  auto cluster = StartCluster("torchscript_buffers", shape);
  const uint64_t steps = 9;
  v1::JobSpec spec = TorchScriptJob("tiny_bn.pt", 40, steps, 2, 2);
  // Gradients narrow to FLOAT16 on the wire; buffer partitions still travel (and are
  // accepted only) as FLOAT32.
  spec.set_wire_dtype(v1::FLOAT16);
  const v1::Job job = RunJob(*cluster, spec);
  ASSERT_EQ(job.state(), v1::COMPLETED) << job.state_reason();
  EXPECT_GT(job.result().test_accuracy(), 0.5);

  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/trained_bn.pt";
  absl::StatusOr<cli::ExportResult> exported =
      cli::ExportModel(cluster->coordinator_channel(), cluster->channel_options(), job.job_id(), path);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->step, steps);
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<const std::string>(std::istreambuf_iterator<char>(in),
                                                   std::istreambuf_iterator<char>());
  absl::StatusOr<engine::ModelDef> model = engine::LoadTorchScriptModel(bytes, "trained_bn.pt");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float>& values = *model->initial_values;
  // BatchNorm counted one training pass per step: node 0's first replica's passes,
  // not one per replica or per node.
  EXPECT_EQ(values[model->tensors[8].offset], static_cast<float>(steps));
  EXPECT_NE(values[model->tensors[6].offset], 0.0f);  // running_mean moved.
  EXPECT_EQ(values[model->tensors[9].offset], 2.0f);  // The frozen scale did not.

  // The exported module, loaded back, evaluates to the accuracy the job reported
  // (rank 0 evaluated with the PS's parameters and buffers).
  engine::TrainerOptions options;
  options.torchscript_bytes = bytes;
  v1::JobSpec back = spec;
  back.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(*bytes));
  back.set_max_steps(1);
  auto trainer = engine::LocalTrainer::Create(back, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<engine::LossStats> test = (*trainer)->Evaluate();
  ASSERT_TRUE(test.ok());
  EXPECT_NEAR(test->accuracy(), job.result().test_accuracy(), 1e-6);
}

TEST(TorchScriptTrainingTest, AModelThatDoesNotFitItsDataFailsTheJobNamingTheFile) {
  ClusterShape shape;
  shape.ps_shards = 1;
  shape.workers = 1;
  auto cluster = StartCluster("torchscript_misfit", shape);
  // Two class scores for three-class data: the workers refuse it before step 0.
  const v1::JobSpec spec = TorchScriptJob("two_classes.pt", 32, 20, 1, 1);
  const v1::Job job = RunJob(*cluster, spec);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.step(), 0u);
  EXPECT_THAT(job.state_reason(), HasSubstr("model file two_classes.pt: forward returns 2 class "
                                            "scores per sample"));
}

}  // namespace
}  // namespace tributary::testing
