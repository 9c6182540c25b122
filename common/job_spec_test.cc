#include "common/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace tributary {
namespace {

TEST(JobSpecTest, AnEmptySpecGetsTheDocumentedDefaults) {
  const v1::JobSpec spec = WithDefaults(v1::JobSpec());
  EXPECT_EQ(spec.name(), "job");
  EXPECT_EQ(spec.model().name(), "mlp");
  EXPECT_EQ(spec.model().layer_sizes().size(), 4);
  EXPECT_EQ(spec.dataset().format(), v1::IDX);
  EXPECT_EQ(spec.dataset().directory(), kDefaultIdxDirectory);
  EXPECT_EQ(spec.global_batch_size(), 64u);
  // The main job's recipe, as the CLI's flag defaults give it.
  EXPECT_EQ(spec.epochs(), 3u);
  EXPECT_EQ(spec.optimizer().type(), v1::MOMENTUM);
  EXPECT_FLOAT_EQ(spec.optimizer().learning_rate(), 0.05f);
  EXPECT_FLOAT_EQ(spec.optimizer().momentum(), 0.9f);
  EXPECT_EQ(spec.optimizer().schedule().kind(), v1::COSINE);
  EXPECT_EQ(spec.mode(), v1::SYNC);
  EXPECT_EQ(spec.nodes_min(), 1u);
  EXPECT_EQ(spec.nodes_max(), 1u);
  EXPECT_EQ(spec.replicas_per_worker(), 1u);
  EXPECT_EQ(spec.devices(), v1::AUTO);
  EXPECT_EQ(spec.partition_bytes(), kDefaultPartitionBytes);
  EXPECT_EQ(spec.wire_dtype(), v1::FLOAT32);
  EXPECT_EQ(spec.partition_cut(), v1::CUT_AUTO);
  EXPECT_EQ(spec.seed(), 1u);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecTest, AnAutomaticCutIsTheLayerCutOnlyForSyncWithEveryReplicaOnAGpu) {
  v1::JobSpec spec = WithDefaults(v1::JobSpec());
  ASSERT_EQ(spec.partition_cut(), v1::CUT_AUTO);
  EXPECT_EQ(ResolvedPartitionCut(spec, true), v1::CUT_LAYERS);
  EXPECT_EQ(ResolvedPartitionCut(spec, false), v1::CUT_EVEN);
  for (v1::TrainingMode mode : {v1::ASYNC, v1::BOUNDED_STALENESS, v1::LOCAL_SGD}) {
    spec.set_mode(mode);
    EXPECT_EQ(ResolvedPartitionCut(spec, true), v1::CUT_EVEN) << v1::TrainingMode_Name(mode);
  }
  // A cut that was asked for is kept, wherever the replicas run.
  spec.set_mode(v1::SYNC);
  spec.set_partition_cut(v1::CUT_EVEN);
  EXPECT_EQ(ResolvedPartitionCut(spec, true), v1::CUT_EVEN);
  spec.set_partition_cut(v1::CUT_LAYERS);
  EXPECT_EQ(ResolvedPartitionCut(spec, false), v1::CUT_LAYERS);
  spec.set_mode(v1::LOCAL_SGD);
  EXPECT_EQ(ResolvedPartitionCut(spec, false), v1::CUT_LAYERS);
}

TEST(JobSpecTest, AStoredSpecWithoutACutWasPlannedWithTheEvenCut) {
  v1::JobSpec stored;
  EXPECT_EQ(StoredPartitionCut(stored), v1::CUT_EVEN);
  EXPECT_EQ(StoredPartitionCut(WithDefaults(stored)), v1::CUT_EVEN);  // Read as CUT_AUTO.
  stored.set_partition_cut(v1::CUT_LAYERS);
  EXPECT_EQ(StoredPartitionCut(stored), v1::CUT_LAYERS);
  stored.set_partition_cut(v1::CUT_EVEN);
  EXPECT_EQ(StoredPartitionCut(stored), v1::CUT_EVEN);
}

TEST(JobSpecTest, ModelAndOptimizerDefaultsDependOnTheirKind) {
  v1::JobSpec spec;
  spec.mutable_model()->set_name("cnn");
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec = WithDefaults(spec);
  EXPECT_EQ(spec.model().conv_channels().size(), 2);
  EXPECT_EQ(spec.model().input_shape().size(), 3);
  EXPECT_FLOAT_EQ(spec.optimizer().learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(spec.optimizer().beta2(), 0.999f);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// Each case breaks one field; the error must name that field and the value.
TEST(JobSpecTest, InvalidFieldsAreNamedOneByOne) {
  struct Case {
    std::function<void(v1::JobSpec&)> mutate;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](v1::JobSpec& s) { s.mutable_model()->set_name("resnet"); }, "model.name: "},
      {[](v1::JobSpec& s) { s.mutable_model()->set_layer_sizes(1, 0); }, "model.layer_sizes"},
      {[](v1::JobSpec& s) { s.mutable_model()->set_dropout(1.0f); }, "model.dropout"},
      {[](v1::JobSpec& s) { s.mutable_dataset()->set_format(v1::CSV); }, "dataset.train_path"},
      {[](v1::JobSpec& s) { s.mutable_optimizer()->set_learning_rate(-1); },
       "optimizer.learning_rate: must be a finite number > 0, got -1"},
      {[](v1::JobSpec& s) { s.set_nodes_max(0); s.set_nodes_min(2); }, "nodes_max"},
      {[](v1::JobSpec& s) { s.set_replicas_per_worker(65); }, "replicas_per_worker"},
      {[](v1::JobSpec& s) { s.set_partition_bytes(1001); }, "partition_bytes"},
      {[](v1::JobSpec& s) { s.set_partition_bytes(16); }, "partition_bytes"},
      {[](v1::JobSpec& s) { s.set_partition_cut(static_cast<v1::PartitionCut>(7)); },
       "partition_cut: must be CUT_AUTO, CUT_EVEN or CUT_LAYERS, got 7"},
      {[](v1::JobSpec& s) { s.set_mode(static_cast<v1::TrainingMode>(9)); }, "mode"},
      {[](v1::JobSpec& s) { s.set_mode(v1::BOUNDED_STALENESS); s.set_staleness(0); },
       "staleness"},
      {[](v1::JobSpec& s) {
         s.set_mode(v1::LOCAL_SGD);
         s.set_sync_every(8);
         s.mutable_outer_optimizer()->set_type(v1::ADAM);
         s.mutable_outer_optimizer()->set_learning_rate(0.001f);
       },
       "outer_optimizer.type"},
      {[](v1::JobSpec& s) {
         s.set_mode(v1::LOCAL_SGD);
         s.set_sync_every(8);
         s.mutable_outer_optimizer()->set_type(v1::SGD);
         s.mutable_outer_optimizer()->set_learning_rate(-1);
       },
       "outer_optimizer.learning_rate"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = WithDefaults(v1::JobSpec());
    c.mutate(spec);
    const absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos)
        << "wanted '" << c.expected << "' in: " << status.message();
  }
}

// Every bound of job_spec.h: a spec at the limit is accepted, one past it is refused
// naming the field (before any worker allocates anything for it).
TEST(JobSpecTest, EveryBoundHoldsAtItsLimitAndRefusesOnePast) {
  struct Case {
    std::string field;
    std::function<void(v1::JobSpec&, bool past)> set;
  };
  auto synthetic = [](v1::JobSpec& s) {
    s.mutable_dataset()->set_format(v1::SYNTHETIC);
    s.mutable_dataset()->set_synthetic_features(16);
    s.mutable_dataset()->set_synthetic_classes(4);
    s.mutable_model()->clear_layer_sizes();
    for (uint32_t size : {16, 8, 4}) s.mutable_model()->add_layer_sizes(size);
  };
  const std::vector<Case> cases = {
      {"global_batch_size",
       [](v1::JobSpec& s, bool past) { s.set_global_batch_size(kMaxGlobalBatch + past); }},
      {"epochs", [](v1::JobSpec& s, bool past) { s.set_epochs(kMaxJobEpochs + past); }},
      {"max_steps", [](v1::JobSpec& s, bool past) { s.set_max_steps(kMaxJobSteps + past); }},
      {"nodes_min",
       [](v1::JobSpec& s, bool past) {
         s.set_nodes_min(kMaxJobNodes + past);
         s.set_nodes_max(kMaxJobNodes + past);
       }},
      {"nodes_max", [](v1::JobSpec& s, bool past) { s.set_nodes_max(kMaxJobNodes + past); }},
      {"staleness",
       [](v1::JobSpec& s, bool past) {
         s.set_mode(v1::BOUNDED_STALENESS);
         s.set_staleness(kMaxStaleness + past);
       }},
      {"sync_every",
       [](v1::JobSpec& s, bool past) {
         s.set_mode(v1::LOCAL_SGD);
         s.mutable_outer_optimizer()->set_type(v1::SGD);
         s.mutable_outer_optimizer()->set_learning_rate(1);
         s.set_sync_every(kMaxSyncEvery + past);
       }},
      {"model.layer_sizes",
       [](v1::JobSpec& s, bool past) {
         s.mutable_model()->clear_layer_sizes();
         for (int i = 0; i < kMaxLayers + past; ++i) s.mutable_model()->add_layer_sizes(8);
       }},
      {"model.layer_sizes",  // One size past 65536 (batch 1 keeps the activations small).
       [](v1::JobSpec& s, bool past) {
         s.set_global_batch_size(1);
         s.mutable_model()->set_layer_sizes(1, kMaxLayerSize + past);
         s.mutable_model()->set_layer_sizes(2, 2);
       }},
      {"model.layer_sizes",  // 2^28 parameters: [16383, 16383, 2] has 268,402,689 + ...
       [](v1::JobSpec& s, bool past) {
         s.set_global_batch_size(1);
         s.mutable_model()->clear_layer_sizes();
         // in*out + out = 2^28 exactly for in = 2^14 - 1, out = 2^14; one more input past.
         s.mutable_model()->add_layer_sizes((1 << 14) - 1 + past);
         s.mutable_model()->add_layer_sizes(1 << 14);
       }},
      {"global_batch_size",  // A 65536-wide layer takes the batch's activations to 2^28.
       [](v1::JobSpec& s, bool past) {
         s.set_global_batch_size(4096 + past);
         s.mutable_model()->clear_layer_sizes();
         for (uint32_t size : {65536, 2}) s.mutable_model()->add_layer_sizes(size);
       }},
      {"model.conv_channels",
       [](v1::JobSpec& s, bool past) {
         s.set_global_batch_size(1);
         s.mutable_model()->set_name("cnn");
         s.mutable_model()->clear_layer_sizes();
         for (uint32_t size : {4, 2}) s.mutable_model()->add_layer_sizes(size);
         s.mutable_model()->clear_input_shape();
         for (uint32_t extent : {1, 4, 4}) s.mutable_model()->add_input_shape(extent);
         s.mutable_model()->clear_conv_channels();
         for (uint64_t c : {uint64_t{1}, kMaxConvChannels + past}) {
           s.mutable_model()->add_conv_channels(c);
         }
       }},
      {"model.input_shape",
       [](v1::JobSpec& s, bool past) {
         s.set_global_batch_size(1);
         s.mutable_model()->set_name("cnn");
         s.mutable_model()->clear_layer_sizes();
         for (uint32_t size : {2, 2}) s.mutable_model()->add_layer_sizes(size);
         s.mutable_model()->clear_input_shape();
         for (uint64_t extent : {uint64_t{1}, uint64_t{4}, kMaxInputExtent + past}) {
           s.mutable_model()->add_input_shape(extent);
         }
         s.mutable_model()->clear_conv_channels();
         for (uint32_t c : {1, 1}) s.mutable_model()->add_conv_channels(c);
       }},
      {"dataset.synthetic_train_samples",
       [&](v1::JobSpec& s, bool past) {
         synthetic(s);
         s.mutable_dataset()->set_synthetic_features(1);
         s.mutable_dataset()->set_synthetic_test_samples(1);
         s.mutable_model()->set_layer_sizes(0, 1);
         s.mutable_dataset()->set_synthetic_train_samples(kMaxSyntheticSamples + past);
       }},
      {"dataset.synthetic_test_samples",
       [&](v1::JobSpec& s, bool past) {
         synthetic(s);
         s.mutable_dataset()->set_synthetic_features(1);
         s.mutable_model()->set_layer_sizes(0, 1);
         s.mutable_dataset()->set_synthetic_test_samples(kMaxSyntheticSamples + past);
       }},
      {"dataset.synthetic_features",
       [&](v1::JobSpec& s, bool past) {
         synthetic(s);
         s.set_global_batch_size(1);
         s.mutable_dataset()->set_synthetic_train_samples(1);
         s.mutable_dataset()->set_synthetic_test_samples(1);
         s.mutable_dataset()->set_synthetic_features(kMaxSyntheticFeatures + past);
         s.mutable_model()->set_layer_sizes(0, kMaxSyntheticFeatures);
       }},
      {"dataset.synthetic_classes",
       [&](v1::JobSpec& s, bool past) {
         synthetic(s);
         s.mutable_dataset()->set_synthetic_classes(kMaxSyntheticClasses + past);
       }},
      {"dataset.synthetic_train_samples",  // 2^28 floats of synthetic data in all.
       [&](v1::JobSpec& s, bool past) {
         synthetic(s);
         s.mutable_dataset()->set_synthetic_features(16);
         s.mutable_dataset()->set_synthetic_train_samples((1 << 24) - 1024 + past);
         s.mutable_dataset()->set_synthetic_test_samples(1024);
       }},
  };
  for (const Case& c : cases) {
    for (bool past : {false, true}) {
      v1::JobSpec spec = WithDefaults(v1::JobSpec());
      c.set(spec, past);
      spec = WithDefaults(spec);
      const absl::Status status = ValidateJobSpec(spec);
      if (!past) {
        EXPECT_TRUE(status.ok()) << c.field << " at its limit: " << status;
      } else {
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field << " past it";
        EXPECT_EQ(status.message().find(c.field + ":"), 0u)
            << "wanted '" << c.field << "' first in: " << status.message();
      }
    }
  }
}

std::string ErrorOf(const v1::JobSpec& spec) {
  const absl::Status status = ValidateJobSpec(WithDefaults(spec));
  return status.ok() ? "ok" : std::string(status.message());
}

TEST(JobSpecTest, TorchScriptModelsNeedAnUploadedDigestAndNoNativeKnobs) {
  v1::JobSpec spec;
  spec.mutable_model()->set_name(kTorchScriptModel);
  EXPECT_NE(ErrorOf(spec).find("model.torchscript.sha256: must be the 64 lowercase hex digits"),
            std::string::npos)
      << ErrorOf(spec);
  const std::string digest(64, 'a');
  spec.mutable_model()->mutable_torchscript()->set_sha256(digest);
  EXPECT_EQ(ErrorOf(spec), "ok");
  EXPECT_EQ(WithDefaults(spec).model().torchscript().file_name(), "aaaaaaaaaaaa.pt");
  EXPECT_TRUE(WithDefaults(spec).model().layer_sizes().empty());
  spec.mutable_model()->mutable_torchscript()->set_file_name("../etc/passwd");
  EXPECT_NE(ErrorOf(spec).find("model.torchscript.file_name"), std::string::npos);
  spec.mutable_model()->mutable_torchscript()->set_file_name("net.pt");
  spec.mutable_model()->add_layer_sizes(10);
  EXPECT_NE(ErrorOf(spec).find("model.layer_sizes: must be unset for torchscript"),
            std::string::npos);
  spec.mutable_model()->clear_layer_sizes();
  spec.mutable_model()->set_dropout(0.5f);
  EXPECT_NE(ErrorOf(spec).find("model.dropout: must be 0 for torchscript"), std::string::npos);
  spec.mutable_model()->set_dropout(0);
  spec.set_devices(v1::GPU);
  EXPECT_NE(ErrorOf(spec).find("devices: torchscript models run on CPU only"), std::string::npos);
  v1::JobSpec native;
  native.mutable_model()->mutable_torchscript()->set_sha256(digest);
  EXPECT_NE(ErrorOf(native).find("is only for model.name 'torchscript', not 'mlp'"),
            std::string::npos);
}

TEST(JobSpecTest, NpyDatasetsNeedFeaturesAndLabelsInPairs) {
  v1::JobSpec spec;
  spec.mutable_dataset()->set_format(v1::NPY);
  EXPECT_NE(ErrorOf(spec).find("dataset.train_path: NPY needs a training features file"),
            std::string::npos);
  spec.mutable_dataset()->set_train_path("x.npy");
  EXPECT_NE(ErrorOf(spec).find("dataset.train_labels_path"), std::string::npos);
  spec.mutable_dataset()->set_train_labels_path("y.npy");
  EXPECT_EQ(ErrorOf(spec), "ok");
  spec.mutable_dataset()->set_test_path("tx.npy");
  EXPECT_NE(ErrorOf(spec).find("dataset.test_labels_path"), std::string::npos);
  spec.mutable_dataset()->set_test_labels_path("ty.npy");
  EXPECT_EQ(ErrorOf(spec), "ok");
}

TEST(JobSpecTest, StepsAndTheShortLastBatch) {
  v1::JobSpec spec = WithDefaults(v1::JobSpec());
  spec.set_global_batch_size(64);
  spec.set_epochs(3);
  EXPECT_EQ(StepsPerEpoch(spec, 1000), 16u);  // 15 full batches + 40
  EXPECT_EQ(TotalSteps(spec, 1000), 48u);
  EXPECT_EQ(BatchSizeOfStep(spec, 1000, 0), 64u);
  EXPECT_EQ(BatchSizeOfStep(spec, 1000, 15), 40u);
  EXPECT_EQ(BatchSizeOfStep(spec, 1000, 16), 64u);  // next epoch
  spec.set_max_steps(20);
  EXPECT_EQ(TotalSteps(spec, 1000), 20u);
  spec.set_epochs(0);
  EXPECT_EQ(TotalSteps(spec, 1000), 20u);
}

TEST(JobSpecTest, JobIdsAreNamesThatCanBeFileNames) {
  EXPECT_TRUE(IsJobId("job-1-ab.c_d"));
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId("../etc"));
  EXPECT_FALSE(IsJobId("a/b"));
  EXPECT_FALSE(IsJobId(std::string(129, 'a')));
  EXPECT_TRUE(IsJobId(std::string(128, 'a')));
}

TEST(JobSpecTest, ResumeAndInitFromAreBoundedAndExclusive) {
  v1::JobSpec spec = WithDefaults(v1::JobSpec());
  spec.set_resume_from("job-3-ab12");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_resume_from("../job-3");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()), ::testing::HasSubstr("resume_from"));
  spec.set_resume_from(std::string(128, 'j'));
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_resume_from(std::string(129, 'j'));
  EXPECT_FALSE(ValidateJobSpec(spec).ok());
  spec.clear_resume_from();
  spec.set_init_from(std::string(kMaxInitFromBytes, 'p'));
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_init_from(std::string(kMaxInitFromBytes + 1, 'p'));
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()), ::testing::HasSubstr("init_from"));
  spec.set_init_from("/data/params.f32");
  spec.set_resume_from("job-3-ab12");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              ::testing::HasSubstr("cannot be given with resume_from"));
}

// Workers and shards refuse a path with a '..' part; SubmitJob (and the CLI, with the
// same check) says so at once, naming the field (issue 23: it failed 12 s later on the
// workers).
TEST(JobSpecTest, PathsWithDotDotAreRefusedNamingTheField) {
  const v1::JobSpec good = WithDefaults(v1::JobSpec());
  ASSERT_TRUE(ValidateJobSpec(good).ok());
  struct Case {
    std::function<void(v1::JobSpec&, const std::string&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::JobSpec& s, const std::string& p) { s.mutable_dataset()->set_directory(p); },
       "dataset.directory"},
      {[](v1::JobSpec& s, const std::string& p) { s.mutable_dataset()->set_train_path(p); },
       "dataset.train_path"},
      {[](v1::JobSpec& s, const std::string& p) { s.mutable_dataset()->set_test_labels_path(p); },
       "dataset.test_labels_path"},
      {[](v1::JobSpec& s, const std::string& p) { s.set_checkpoint_dir(p); }, "checkpoint_dir"},
      {[](v1::JobSpec& s, const std::string& p) { s.set_init_from(p); }, "init_from"},
  };
  for (const Case& c : cases) {
    for (const std::string& path : {std::string("../x"), std::string("/data/../etc"),
                                    std::string("a/.."), std::string("..")}) {
      v1::JobSpec spec = good;
      c.set(spec, path);
      const absl::Status refused = ValidateJobSpec(spec);
      EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << c.field << " " << path;
      EXPECT_THAT(std::string(refused.message()),
                  ::testing::StartsWith(c.field + ": '..' is not allowed in a path"));
      EXPECT_THAT(std::string(refused.message()), ::testing::EndsWith("got '" + path + "'"));
    }
    // Names that merely contain dots are fine.
    v1::JobSpec spec = good;
    c.set(spec, "/data/..hidden/x..y/...");
    EXPECT_EQ(ValidateJobSpec(spec).message().find("'..'"), absl::string_view::npos) << c.field;
  }
}

TEST(JobSpecTest, AboutTenEvaluationsARunOnAThousandTestSamplesUnlessAsked) {
  v1::JobSpec spec;
  EXPECT_EQ(EvalIntervalSteps(spec, 938), 94u);  // One Fashion-MNIST epoch: 10 evaluations.
  EXPECT_EQ(EvalIntervalSteps(spec, 940), 94u);
  EXPECT_EQ(EvalIntervalSteps(spec, 941), 95u);
  EXPECT_EQ(EvalIntervalSteps(spec, 4), 1u);
  EXPECT_EQ(EvalIntervalSteps(spec, 0), 1u);
  EXPECT_EQ(EvalIntervalSteps(spec, uint64_t{1} << 40), ((uint64_t{1} << 40) + 9) / 10);
  EXPECT_EQ(PeriodicEvalSamples(spec), 1000u);
  spec.set_eval_interval_steps(50);
  spec.set_eval_samples(200);
  EXPECT_EQ(EvalIntervalSteps(spec, 938), 50u);
  EXPECT_EQ(PeriodicEvalSamples(spec), 200u);
  // WithDefaults leaves both to the worker, which knows the steps.
  EXPECT_EQ(WithDefaults(v1::JobSpec()).eval_interval_steps(), 0u);
}

TEST(JobSpecTest, EvaluationsComeEveryIntervalAndAfterTheLastStepOnTheWholeSplit) {
  v1::JobSpec spec;
  spec.set_eval_interval_steps(40);
  spec.set_eval_samples(300);
  std::vector<uint64_t> after;
  for (uint64_t done = 1; done <= 100; ++done) {
    if (EvaluatesAfter(spec, done, 100)) after.push_back(done);
  }
  EXPECT_EQ(after, (std::vector<uint64_t>{40, 80, 100}));
  EXPECT_EQ(EvalSamplesAfter(spec, 80, 100), 300u);
  EXPECT_EQ(EvalSamplesAfter(spec, 100, 100), 0u);  // The whole test split.
  // The largest counts do not overflow or divide by zero.
  spec.set_eval_interval_steps(0);
  spec.set_eval_samples(UINT64_MAX);
  EXPECT_EQ(EvalSamplesAfter(spec, 1, UINT64_MAX), UINT64_MAX);
  EXPECT_TRUE(EvaluatesAfter(spec, UINT64_MAX, UINT64_MAX));
  EXPECT_FALSE(EvaluatesAfter(spec, 1, UINT64_MAX));
  EXPECT_TRUE(EvaluatesAfter(spec, 0, 0));
}

}  // namespace
}  // namespace tributary
