// The job flags of `tributary local` / `submit`: every knob reaches the JobSpec, flags
// given on the command line override --job_json and nothing else does, and a bad value
// names its flag.
#include "common/job_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

ABSL_DECLARE_FLAG(std::string, job_json);
ABSL_DECLARE_FLAG(std::string, partition_cut);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, input_shape);
ABSL_DECLARE_FLAG(std::string, dataset);
ABSL_DECLARE_FLAG(uint64_t, synthetic_train);
ABSL_DECLARE_FLAG(uint64_t, synthetic_test);
ABSL_DECLARE_FLAG(uint32_t, synthetic_features);
ABSL_DECLARE_FLAG(uint32_t, synthetic_classes);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(bool, nesterov);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(double, beta1);
ABSL_DECLARE_FLAG(double, beta2);
ABSL_DECLARE_FLAG(double, epsilon);
ABSL_DECLARE_FLAG(uint32_t, batch);
ABSL_DECLARE_FLAG(uint32_t, epochs);
ABSL_DECLARE_FLAG(uint64_t, max_steps);
ABSL_DECLARE_FLAG(std::string, resume);
ABSL_DECLARE_FLAG(std::string, init_from);
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(uint32_t, staleness);
ABSL_DECLARE_FLAG(uint32_t, sync_every);
ABSL_DECLARE_FLAG(std::string, outer_optimizer);
ABSL_DECLARE_FLAG(double, outer_lr);
ABSL_DECLARE_FLAG(bool, outer_nesterov);
ABSL_DECLARE_FLAG(std::string, data_dir);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(std::string, train_csv);
ABSL_DECLARE_FLAG(std::string, model_file);

namespace tributary {
namespace {

using ::testing::HasSubstr;

// Each test starts from the flags' defaults and a command line that names `given`.
class JobFlagsTest : public ::testing::Test {
 protected:
  void Given(std::vector<std::string> names) {
    std::vector<std::string> args = {"tributary"};
    for (const std::string& name : names) args.push_back("--" + name + "=x");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    RememberGivenFlags(static_cast<int>(argv.size()), argv.data());
  }
  void SetUp() override { Given({}); }
  absl::FlagSaver saver_;
};

TEST_F(JobFlagsTest, DefaultsAreTheMainJob) {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().name(), "mlp");
  EXPECT_EQ(spec->dataset().format(), v1::IDX);
  EXPECT_EQ(spec->mode(), v1::SYNC);
  EXPECT_EQ(spec->epochs(), 3u);
  // --replicas 0: the proto default; `tributary local` then sizes it to the cores.
  EXPECT_EQ(spec->replicas_per_worker(), 1u);
  EXPECT_EQ(spec->optimizer().type(), v1::MOMENTUM);
  EXPECT_FLOAT_EQ(spec->optimizer().learning_rate(), 0.05f);
  // Cosine decay: the recipe that reaches 0.87 in 3 epochs (constant: 0.855).
  EXPECT_EQ(spec->optimizer().schedule().kind(), v1::COSINE);
}

TEST_F(JobFlagsTest, ThePartitionCutIsAutomaticUnlessACutIsAskedFor) {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->partition_cut(), v1::CUT_AUTO);
  absl::SetFlag(&FLAGS_partition_cut, "even");
  Given({"partition_cut"});
  spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->partition_cut(), v1::CUT_EVEN);
  absl::SetFlag(&FLAGS_partition_cut, "layers");
  Given({"partition_cut"});
  spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->partition_cut(), v1::CUT_LAYERS);
  absl::SetFlag(&FLAGS_partition_cut, "rows");
  const absl::StatusOr<v1::JobSpec> bad = JobSpecFromFlags();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("partition_cut"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("rows"), std::string::npos) << bad.status();
}

TEST_F(JobFlagsTest, SyntheticSizesAndInputShapeReachTheSpec) {
  absl::SetFlag(&FLAGS_dataset, "synthetic");
  absl::SetFlag(&FLAGS_synthetic_train, 300);
  absl::SetFlag(&FLAGS_synthetic_test, 50);
  absl::SetFlag(&FLAGS_synthetic_features, 784);
  absl::SetFlag(&FLAGS_synthetic_classes, 3);
  absl::SetFlag(&FLAGS_model, "cnn");
  absl::SetFlag(&FLAGS_input_shape, "1,28,28");
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dataset().synthetic_train_samples(), 300u);
  EXPECT_EQ(spec->dataset().synthetic_test_samples(), 50u);
  EXPECT_EQ(spec->dataset().synthetic_features(), 784u);
  EXPECT_EQ(spec->dataset().synthetic_classes(), 3u);
  EXPECT_THAT(spec->model().input_shape(), ::testing::ElementsAre(1, 28, 28));

  absl::SetFlag(&FLAGS_input_shape, "28,28");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--input_shape=28,28: expected three sizes"));
}

TEST_F(JobFlagsTest, AdamKeepsItsOwnRateUnlessOneIsGivenAndTakesItsMoments) {
  absl::SetFlag(&FLAGS_optimizer, "adam");
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FLOAT_EQ(spec->optimizer().learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta2(), 0.999f);

  absl::SetFlag(&FLAGS_lr, 0.003);
  absl::SetFlag(&FLAGS_beta1, 0.8);
  absl::SetFlag(&FLAGS_beta2, 0.99);
  absl::SetFlag(&FLAGS_epsilon, 1e-6);
  Given({"lr", "beta1", "beta2", "epsilon"});
  spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FLOAT_EQ(spec->optimizer().learning_rate(), 0.003f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta1(), 0.8f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta2(), 0.99f);
  EXPECT_FLOAT_EQ(spec->optimizer().epsilon(), 1e-6f);

  absl::SetFlag(&FLAGS_optimizer, "momentum");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--beta1=0.800000: expected --optimizer=adam or adamw"));
}

TEST_F(JobFlagsTest, OnlyFlagsGivenOverrideTheJobJson) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/job.json";
  std::ofstream(path) << R"({"name": "from-json", "model": {"name": "logreg",
      "layerSizes": [784, 10]}, "globalBatchSize": 32, "mode": "ASYNC",
      "optimizer": {"type": "SGD", "learningRate": 0.2}})";
  absl::SetFlag(&FLAGS_job_json, path);
  absl::SetFlag(&FLAGS_batch, 128);
  Given({"job_json", "batch"});
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "from-json");
  EXPECT_EQ(spec->model().name(), "logreg");
  EXPECT_EQ(spec->mode(), v1::ASYNC) << "--mode was not given: the JSON's stands";
  EXPECT_FLOAT_EQ(spec->optimizer().learning_rate(), 0.2f);
  EXPECT_EQ(spec->global_batch_size(), 128u) << "--batch was given: it wins";
}

TEST_F(JobFlagsTest, LocalSgdTakesItsRoundAndOuterOptimizerAndOnlyThen) {
  absl::SetFlag(&FLAGS_mode, "local_sgd");
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mode(), v1::LOCAL_SGD);
  EXPECT_EQ(spec->sync_every(), 8u) << "the job default";
  EXPECT_EQ(spec->outer_optimizer().type(), v1::SGD);
  EXPECT_FLOAT_EQ(spec->outer_optimizer().learning_rate(), 1.0f) << "plain averaging";
  EXPECT_EQ(spec->optimizer().type(), v1::MOMENTUM) << "the inner optimizer is the job's";

  absl::SetFlag(&FLAGS_sync_every, 16);
  absl::SetFlag(&FLAGS_outer_optimizer, "momentum");
  absl::SetFlag(&FLAGS_outer_lr, 0.7);
  absl::SetFlag(&FLAGS_outer_nesterov, true);
  spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sync_every(), 16u);
  EXPECT_EQ(spec->outer_optimizer().type(), v1::MOMENTUM);
  EXPECT_FLOAT_EQ(spec->outer_optimizer().learning_rate(), 0.7f);
  EXPECT_FLOAT_EQ(spec->outer_optimizer().momentum(), 0.9f);
  EXPECT_TRUE(spec->outer_optimizer().nesterov());

  absl::SetFlag(&FLAGS_outer_optimizer, "adam");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--outer_optimizer=adam: expected one of sgd, momentum"));
  // Momentum's settings with plain SGD would do nothing: refused.
  absl::SetFlag(&FLAGS_outer_optimizer, "sgd");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--outer_nesterov=true: expected --outer_optimizer=momentum"));
  absl::SetFlag(&FLAGS_outer_nesterov, false);
  Given({"outer_momentum"});
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--outer_momentum=0.900000: expected --outer_optimizer=momentum"));
  Given({});
  absl::SetFlag(&FLAGS_optimizer, "adam");
  absl::SetFlag(&FLAGS_nesterov, true);
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--nesterov=true: expected --optimizer=momentum"));
  absl::SetFlag(&FLAGS_nesterov, false);
  Given({"momentum"});
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--momentum=0.900000: expected --optimizer=momentum"));
  Given({});
  absl::SetFlag(&FLAGS_optimizer, "momentum");

  // Given with another mode, the local SGD flags are refused, not ignored.
  absl::SetFlag(&FLAGS_mode, "sync");
  Given({"sync_every"});
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--sync_every: applies only with --mode=local_sgd (the job's mode is SYNC)"));
  absl::SetFlag(&FLAGS_sync_every, 2000000);
  absl::SetFlag(&FLAGS_mode, "local_sgd");
  absl::SetFlag(&FLAGS_outer_optimizer, "sgd");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--sync_every: sync_every must be in [1, 1000000], got 2000000"));
}

// Values that used to be replaced by a default behind the user's back are refused,
// naming the flag; a bad value is reported in the flag's words, not the proto field's.
TEST_F(JobFlagsTest, ZerosThatWouldBecomeDefaultsAreRefused) {
  absl::SetFlag(&FLAGS_batch, 0);
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--batch=0: expected a batch size in [1, 65536]"));
  absl::SetFlag(&FLAGS_batch, 64);

  Given({"replicas"});
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--replicas=0: expected a replica count in [1, 64]"));
  Given({});

  absl::SetFlag(&FLAGS_epochs, 0);
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--epochs=0: bounded by --max_steps alone, so --max_steps must be given"));
  absl::SetFlag(&FLAGS_max_steps, 100);
  absl::StatusOr<v1::JobSpec> steps_only = JobSpecFromFlags();
  ASSERT_TRUE(steps_only.ok()) << steps_only.status();
  EXPECT_EQ(steps_only->epochs(), 0u) << "as documented: --max_steps alone";
  EXPECT_EQ(steps_only->max_steps(), 100u);
}

TEST_F(JobFlagsTest, ErrorsNameTheFlagNotTheProtoField) {
  absl::SetFlag(&FLAGS_lr, -1.0);
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--lr: optimizer.learning_rate must be a finite number > 0, got -1"));
  absl::SetFlag(&FLAGS_lr, 0.05);
  absl::SetFlag(&FLAGS_model, "resnet");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--model: model.name"));
}

TEST_F(JobFlagsTest, ResumeAndInitFromReachTheSpec) {
  absl::SetFlag(&FLAGS_resume, "job-3-abcd");
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resume_from(), "job-3-abcd");
  absl::SetFlag(&FLAGS_init_from, "/data/trained.f32");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--init_from: init_from cannot be given with resume_from"));
  absl::SetFlag(&FLAGS_resume, "../job");
  absl::SetFlag(&FLAGS_init_from, "");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()), HasSubstr("--resume: "));
}

// A '..' in a path flag is refused before anything starts, naming the flag (issue 23:
// --data_dir and --checkpoint_dir passed and failed 12 s later on the workers).
TEST_F(JobFlagsTest, PathsWithDotDotNameTheirFlag) {
  Given({"data_dir"});
  absl::SetFlag(&FLAGS_data_dir, "/usr/share/datasets/../datasets/fashion-mnist");
  const std::string data_dir = std::string(JobSpecFromFlags().status().message());
  EXPECT_THAT(data_dir, HasSubstr("--data_dir: dataset.directory '..' is not allowed"));
  EXPECT_THAT(data_dir, HasSubstr("got '/usr/share/datasets/../datasets/fashion-mnist'"));
  absl::SetFlag(&FLAGS_data_dir, "/usr/share/datasets/fashion-mnist");
  Given({"checkpoint_dir"});
  absl::SetFlag(&FLAGS_checkpoint_dir, "ckpt/../../elsewhere");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--checkpoint_dir: checkpoint_dir '..' is not allowed"));
  absl::SetFlag(&FLAGS_checkpoint_dir, "");
  Given({"dataset", "train_csv"});
  absl::SetFlag(&FLAGS_dataset, "csv");
  absl::SetFlag(&FLAGS_train_csv, "../train.csv");
  const std::string csv = std::string(JobSpecFromFlags().status().message());
  EXPECT_THAT(csv, HasSubstr("--train_csv: dataset.train_path '..' is not allowed"));
  EXPECT_THAT(csv, HasSubstr("got '../train.csv'"));
}

// One limit for model files wherever they go: the CLI reads none larger than the
// coordinator takes by default (it read 1 GiB files the coordinator then refused).
TEST_F(JobFlagsTest, AModelFileLargerThanTheCoordinatorTakesIsRefused) {
  const std::string path = ::testing::TempDir() + "/huge.pt";
  {
    std::ofstream file(path);
  }
  ASSERT_EQ(truncate(path.c_str(), kMaxModelFileBytes + 1), 0);  // Sparse: no disk used.
  Given({"model_file"});
  absl::SetFlag(&FLAGS_model_file, path);
  const std::string refused = std::string(JobSpecFromFlags().status().message());
  EXPECT_THAT(refused, HasSubstr("--model_file=" + path));
  EXPECT_THAT(refused, HasSubstr(absl::StrCat("more than the limit of ", kMaxModelFileBytes)));
  EXPECT_EQ(kMaxModelFileBytes, int64_t{256} << 20) << "the coordinator's --max_model_bytes";
}

TEST_F(JobFlagsTest, BadValuesNameTheirFlag) {
  absl::SetFlag(&FLAGS_mode, "eventually");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("--mode=eventually: expected one of sync, async, bounded"));
  absl::SetFlag(&FLAGS_mode, "sync");
  absl::SetFlag(&FLAGS_job_json, "/nonexistent/job.json");
  EXPECT_THAT(std::string(JobSpecFromFlags().status().message()),
              HasSubstr("/nonexistent/job.json"));
}

}  // namespace
}  // namespace tributary
