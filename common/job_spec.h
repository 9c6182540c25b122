// Defaults and validation of a JobSpec, shared by the coordinator (which checks
// what operators submit), the workers, the PS and the single-process trainer (which
// all read the spec with the same defaults).
#ifndef TRIBUTARY_COMMON_JOB_SPEC_H_
#define TRIBUTARY_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace tributary {

inline constexpr int64_t kDefaultPartitionBytes = 4 << 20;
// The defaults of every entry point (WithDefaults, the CLI's flags, train_local).
inline constexpr uint32_t kDefaultEpochs = 3;
inline constexpr float kDefaultLearningRate = 0.05f;       // SGD and MOMENTUM.
inline constexpr float kDefaultAdamLearningRate = 0.001f;  // ADAM and ADAMW.
inline constexpr int64_t kMinPartitionBytes = 256;
inline constexpr int64_t kMaxPartitionBytes = 256 << 20;
// Bounds on what a job may ask for, checked by ValidateJobSpec before anything is
// allocated (docs/security.md, "Limits"). A job past them is refused, naming the field.
inline constexpr uint64_t kMaxGlobalBatch = 65536;
inline constexpr uint32_t kMaxJobEpochs = 1000000;
inline constexpr uint64_t kMaxJobSteps = uint64_t{1} << 40;
inline constexpr uint32_t kMaxJobNodes = 65536;
// Largest TorchScript model file: what the CLI reads and uploads, and the default of the
// coordinator's --max_model_bytes (256 MiB).
inline constexpr int64_t kMaxModelFileBytes = int64_t{256} << 20;
// The longest token window (DatasetSpec.seq_len).
inline constexpr int64_t kMaxSeqLen = 65536;
// PS shards a cluster may have (coordinator --ps_shards; a plan's num_shards).
inline constexpr uint32_t kMaxPsShards = 1024;
inline constexpr uint32_t kMaxStaleness = 1000000;
inline constexpr uint32_t kDefaultSyncEvery = 8;
inline constexpr uint32_t kMaxSyncEvery = 1000000;
inline constexpr int kMaxLayers = 64;
inline constexpr uint64_t kMaxLayerSize = 65536;      // Any entry of layer_sizes.
inline constexpr uint64_t kMaxConvChannels = 4096;
inline constexpr uint64_t kMaxInputExtent = 4096;     // input_shape's channels, height, width.
inline constexpr uint64_t kMaxModelParameters = uint64_t{1} << 28;  // 1 GiB of float32.
// Floats in one layer's activations for the whole global batch (one replica may hold
// the whole batch): 1 GiB.
inline constexpr uint64_t kMaxActivationFloats = uint64_t{1} << 28;
inline constexpr uint64_t kMaxSyntheticSamples = uint64_t{1} << 24;
inline constexpr uint64_t kMaxSyntheticFeatures = 65536;
inline constexpr uint64_t kMaxSyntheticClasses = 65536;
// Floats of a synthetic dataset (train + test) a worker makes: 1 GiB.
inline constexpr uint64_t kMaxSyntheticFloats = uint64_t{1} << 28;

inline constexpr char kDefaultIdxDirectory[] = "/usr/share/datasets/fashion-mnist";
// ModelSpec.name of the user's own TorchScript module.
inline constexpr char kTorchScriptModel[] = "torchscript";

inline bool IsTorchScript(const v1::ModelSpec& model) { return model.name() == kTorchScriptModel; }

inline constexpr uint32_t kMaxPendingTimeoutSeconds = 31536000;
// Evaluations of a run when JobSpec.eval_interval_steps is 0, and the test samples of
// each evaluation before the last step when JobSpec.eval_samples is 0.
inline constexpr uint64_t kDefaultEvaluationsPerRun = 10;
inline constexpr uint64_t kDefaultEvalSamples = 1000;

// Steps between evaluations of a job of `total_steps`: its eval_interval_steps, or about
// kDefaultEvaluationsPerRun a run (at least 1).
uint64_t EvalIntervalSteps(const v1::JobSpec& spec, uint64_t total_steps);
// Test samples an evaluation before the last step takes (the first of the split).
uint64_t PeriodicEvalSamples(const v1::JobSpec& spec);
// Whether rank 0 (and train_local) evaluates once `steps_done` of `total_steps` steps
// are done: every EvalIntervalSteps and after the last step.
bool EvaluatesAfter(const v1::JobSpec& spec, uint64_t steps_done, uint64_t total_steps);
// The test samples that evaluation takes: PeriodicEvalSamples before the last step,
// 0 (the whole test split) after it.
uint64_t EvalSamplesAfter(const v1::JobSpec& spec, uint64_t steps_done, uint64_t total_steps);
// The longest JobSpec.init_from path.
inline constexpr size_t kMaxInitFromBytes = 4096;

// COMPLETED, FAILED or STOPPED: the job will not run again.
bool IsTerminal(v1::JobState state);

// A job id as the coordinator makes them and the PS names files by: 1-128 characters
// of [A-Za-z0-9._-].
bool IsJobId(const std::string& id);

// A model file's name as jobs and uploads carry it: 1-255 printable ASCII characters,
// no '/' or backslash, not "." or "..".
bool IsModelFileName(const std::string& name);

// Every unset field gets the default its comment in proto/job.proto gives. Values that
// are set are kept as they are, even when invalid (ValidateJobSpec reports them).
v1::JobSpec WithDefaults(v1::JobSpec spec);

// OK, or INVALID_ARGUMENT naming the first bad field and its value, e.g.
// "global_batch_size: must be > 0, got 0". Expects WithDefaults to have been applied.
// Checks what can be checked without the data (a missing dataset file is the
// worker's to report), every size against the bounds above, and the built-in model's
// parameter count and widest activation against kMaxModelParameters and
// kMaxActivationFloats.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Roughly what a job needs in memory, to place it only on workers that reported enough
// (RegisterWorker's Device.memory_bytes). Zero where it cannot be known before the
// worker loads the job (a TorchScript model's size, a dataset file's).
struct MemoryEstimate {
  uint64_t parameters = 0;
  // One replica: its parameters four times (values, gradients, the pulled copy, the
  // reduction buffer) and every layer's activations and their gradients for its share
  // of the global batch.
  uint64_t replica_bytes = 0;
  uint64_t data_bytes = 0;  // A worker's copy of the synthetic data (train + test).
};
// With the global batch shared by `replicas_sharing_batch` replicas (at least 1).
// Expects WithDefaults and ValidateJobSpec to have passed (bounded sizes).
MemoryEstimate EstimateMemory(const v1::JobSpec& spec, uint32_t replicas_sharing_batch);

// The optimizer the PS shards run: the job's, or in LOCAL_SGD its outer optimizer
// (the job's own then runs on every node).
const v1::OptimizerSpec& PsOptimizerSpec(const v1::JobSpec& spec);

// The cut the coordinator gives a CUT_AUTO job when its first generation forms and no
// shard holds its state yet: CUT_LAYERS for SYNC when every replica runs on a GPU
// (`all_replicas_on_gpus`), CUT_EVEN otherwise. A job with CUT_EVEN or CUT_LAYERS keeps
// it.
v1::PartitionCut ResolvedPartitionCut(const v1::JobSpec& spec, bool all_replicas_on_gpus);

// The cut a stored spec's plan was made with (a shard's job, a checkpoint's): CUT_LAYERS
// when it says so, else CUT_EVEN (a spec stored before cuts existed has none, which
// WithDefaults reads as CUT_AUTO; a resolved job never stores CUT_AUTO).
v1::PartitionCut StoredPartitionCut(const v1::JobSpec& stored);

// LOCAL_SGD synchronizations: whether the nodes synchronize after `step` (its
// successor is a multiple of sync_every, or it is the job's last step). Every step
// is a round of its own in the other modes.
bool EndsSyncRound(const v1::JobSpec& spec, uint64_t step, uint64_t total_steps);

// ceil(train_samples / global_batch_size): the last batch of an epoch may be short.
uint64_t StepsPerEpoch(const v1::JobSpec& spec, uint64_t train_samples);

// Steps the job runs: epochs * StepsPerEpoch, capped by max_steps when that is set.
uint64_t TotalSteps(const v1::JobSpec& spec, uint64_t train_samples);

// Samples in step `step` (0-based) of an epoch: global_batch_size, or what is left
// for the last step of the epoch.
uint64_t BatchSizeOfStep(const v1::JobSpec& spec, uint64_t train_samples, uint64_t step);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_JOB_SPEC_H_
