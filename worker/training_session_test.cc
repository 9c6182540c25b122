// A TrainingSession (node 0: two CPU replicas, the node leader) against a real PS
// shard in memory (ParameterShard reached through InMemoryPsConnection: no server),
// with the test playing node 1 by hand so that it can hold
// back its push of one partition. This makes the overlap observable: step 0 returns
// while the update of its last partition cannot have arrived, and the forward pass of
// step 1 starts and reaches the last layer before that partition is in. Training
// stays exact (the single-replica reference), and a missing or interrupted update
// fails the step that needed it. Last, LOCAL_SGD on a replica that keeps its
// parameters apart from the worker's host buffer (as a GPU replica does) takes its
// inner steps there, and only round ends cross between the two.
#include "worker/training_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/batch_split.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "common/thread_slice.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/testing/in_memory_ps.h"
#include "services/parameter_server/testing/in_process_shard.h"
#include "worker/engine/cpu_replica.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/trainer.h"

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;
using ps::testing::InMemoryPsConnection;

constexpr uint32_t kTotalReplicas = 3;               // Node 0: replicas 0 and 1; node 1: replica 2.
constexpr absl::Duration kHang = absl::Seconds(60);  // Only ever reached when broken.

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("overlap");
  spec.mutable_model()->set_name("mlp");
  for (uint32_t size : {32, 24, 16, 4}) spec.mutable_model()->add_layer_sizes(size);
  v1::DatasetSpec& data = *spec.mutable_dataset();
  data.set_format(v1::SYNTHETIC);
  data.set_synthetic_train_samples(400);
  data.set_synthetic_test_samples(100);
  data.set_synthetic_features(32);
  data.set_synthetic_classes(4);
  spec.set_global_batch_size(30);
  spec.set_max_steps(4);
  spec.set_epochs(0);
  spec.mutable_optimizer()->set_type(v1::MOMENTUM);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.set_nodes_min(2);
  spec.set_replicas_per_worker(2);
  spec.set_partition_bytes(256);  // 20-odd partitions of the 1260 parameters,
  spec.set_partition_cut(v1::CUT_LAYERS);  // cut along the layers (the even cut: elsewhere).
  spec.set_seed(5);
  return WithDefaults(spec);
}

v1::Assignment NodeZero(const v1::JobSpec& spec) {
  v1::Assignment a;
  a.set_job_id("job-1");
  a.set_generation(1);
  a.set_global_rank(0);
  a.set_world_size(2);
  a.set_node_rank(0);
  a.set_num_nodes(2);
  a.set_local_rank(0);
  a.set_local_world_size(1);
  a.set_node_leader(true);
  for (int i = 0; i < 2; ++i) {
    v1::Device* cpu = a.add_devices();
    cpu->set_kind(v1::CPU);
    cpu->set_index(-1);
    cpu->set_name("cpu");
  }
  a.set_replicas(2);
  v1::ShardInfo& shard = *a.add_shards();
  shard.set_shard_index(0);
  shard.set_address("in-memory:0");
  *a.mutable_job() = spec;
  a.set_resume_step(0);
  a.set_total_replicas(kTotalReplicas);
  a.set_first_replica(0);
  a.set_node_first_replica(0);
  a.set_node_replicas(2);
  return a;
}

// Node 1, by hand: one CPU replica and its own PS client, pushing when told to.
class ManualNode {
 public:
  ManualNode(const v1::JobSpec& spec, const engine::Datasets& data, const v1::PartitionPlan& plan,
             ps::ParameterShard& shard)
      : spec_(spec),
        data_(data),
        plan_(plan),
        model_(*engine::BuildModel(spec.model())),
        params_(model_.num_parameters),
        grads_(model_.num_parameters),
        replica_(model_, params_.data()),
        sampler_(spec, data.train.size()),
        // Generation 1 of two nodes: its InitPartitions installs the job at it.
        ps_({&shard}, PsIdentity{"job-1", 1, 1, 2, 0}, plan, v1::SYNC, v1::FLOAT32) {
    engine::InitParameters(model_, spec.seed(), params_.data());
  }

  // Installs the job at generation 1 of two nodes.
  void Install() {
    ASSERT_TRUE(ps_.InitPartitions(spec_, spec_.max_steps(), params_.data()).ok());
    ASSERT_TRUE(ps_.Open().ok());
  }

  // Forward/backward of node 1's share of the step's global batch.
  void Compute(uint64_t step) {
    const std::vector<uint64_t> global = sampler_.GlobalBatch(step);
    const SampleRange mine = PartsRange(global.size(), kTotalReplicas, 2, 1);
    ids_.assign(global.begin() + mine.offset, global.begin() + mine.offset + mine.count);
    features_.resize(mine.count * data_.train.feature_size());
    labels_.resize(mine.count);
    data_.train.Gather(ids_.data(), mine.count, features_.data(), labels_.data());
    engine::Batch batch;
    batch.features = features_.data();
    batch.labels = labels_.data();
    batch.sample_ids = ids_.data();
    batch.count = static_cast<int64_t>(mine.count);
    ASSERT_TRUE(replica_.ForwardBackward(batch, {spec_.seed(), step}, nullptr).ok());
    ASSERT_TRUE(replica_.CopyGradients(0, model_.num_parameters, grads_.data()).ok());
    samples_ = mine.count;
  }

  void Push(uint64_t step, uint32_t partition) {
    ASSERT_TRUE(
        ps_.Push(step, partition, grads_.data() + plan_.partitions(partition).offset(), samples_, 1)
            .ok());
  }

  // Waits for every partition's update and takes it as the next step's parameters.
  void Finish(uint64_t step) {
    for (const v1::Partition& partition : plan_.partitions()) {
      ASSERT_TRUE(ps_.WaitUpdated(partition.id(), step, kHang,
                                  params_.data() + partition.offset())
                      .ok());
    }
  }

  const std::vector<float>& parameters() const { return params_; }

 private:
  const v1::JobSpec spec_;
  const engine::Datasets& data_;
  const v1::PartitionPlan plan_;
  const engine::ModelDef model_;
  std::vector<float> params_, grads_;
  engine::CpuReplica replica_;
  engine::Sampler sampler_;
  InMemoryPsConnection ps_;
  std::vector<uint64_t> ids_;
  std::vector<float> features_;
  std::vector<int32_t> labels_;
  uint64_t samples_ = 0;
};

class TrainingSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = Spec();
    absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec_.dataset(), spec_.seed());
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = *std::move(data);
  }

  // Creates node 0's session and node 1, installs the job, prepares the session.
  // wrap: what the session's PS connection is made of the in-memory one (unset: it).
  void StartBoth(SessionOptions options,
                 std::function<std::unique_ptr<PsConnection>(std::unique_ptr<PsConnection>)>
                     wrap = nullptr) {
    options.update_timeout =
        options.update_timeout == absl::Seconds(120) ? kHang : options.update_timeout;
    options.ps_connection = [this, wrap](const PsIdentity& identity,
                                         const v1::PartitionPlan& plan) {
      std::unique_ptr<PsConnection> connection = std::make_unique<InMemoryPsConnection>(
          std::vector<ps::ParameterShard*>{&shard_}, identity, plan, v1::SYNC, v1::FLOAT32);
      return wrap ? wrap(std::move(connection)) : std::move(connection);
    };
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::Create(NodeZero(spec_), data_, options);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    plan_ = session_->plan();
    ASSERT_GE(plan_.partitions_size(), 10);
    node1_ = std::make_unique<ManualNode>(spec_, data_, plan_, shard_);
    node1_->Install();
    absl::StatusOr<uint64_t> first = session_->Prepare();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(*first, 0u);
  }

  const v1::Partition& first() const { return plan_.partitions(0); }
  const v1::Partition& last() const { return plan_.partitions(plan_.partitions_size() - 1); }

  // Runs the session's step on a thread of its own; the result is ready once `done`.
  struct Running {
    std::thread thread;
    absl::Notification done;
    absl::StatusOr<StepStats> result = absl::UnknownError("not run");
  };
  void RunStepAsync(uint64_t step, Running& running) {
    running.thread = std::thread([this, step, &running] {
      running.result = session_->RunStep(step);
      running.done.Notify();
    });
  }

  // After the job's 4 steps: both nodes hold the parameters of exactly one replica's
  // training with the same global batch.
  void ExpectTheSingleReplicaTraining() {
    engine::TrainerOptions reference_options;
    reference_options.replicas = 1;
    auto reference = engine::LocalTrainer::Create(spec_, reference_options);
    ASSERT_TRUE(reference.ok()) << reference.status();
    for (int step = 0; step < 4; ++step) ASSERT_TRUE((*reference)->Step().ok());
    const std::vector<float>& expected = (*reference)->parameters();
    const std::vector<float>& got = session_->parameters();
    ASSERT_EQ(got.size(), expected.size());
    double largest = 0, worst = 0, moved = 0;
    std::vector<float> initial(expected.size());
    engine::InitParameters(*engine::BuildModel(spec_.model()), spec_.seed(), initial.data());
    for (size_t i = 0; i < expected.size(); ++i) {
      largest = std::max(largest, std::abs(double{expected[i]}));
      worst = std::max(worst, std::abs(double{got[i]} - expected[i]));
      moved = std::max(moved, std::abs(double{got[i]} - initial[i]));
    }
    EXPECT_LE(worst, 1e-5 * largest);
    EXPECT_GT(moved, 1e-3 * largest);      // Training did move them.
    EXPECT_EQ(got, node1_->parameters());  // Both nodes hold the PS's values.
  }

  v1::JobSpec spec_;
  engine::Datasets data_;
  ps::ParameterShard shard_{ps::ShardOptions{}, nullptr};
  std::unique_ptr<TrainingSession> session_;
  v1::PartitionPlan plan_;
  std::unique_ptr<ManualNode> node1_;
};

TEST_F(TrainingSessionTest, TheNextForwardStartsBeforeTheWholeUpdateArrives) {
  absl::Mutex mu;
  // The ranges step 1's forward waited for.
  std::vector<std::pair<int64_t, int64_t>> waits_of_step_1;
  absl::Notification waiting_for_first;
  SessionOptions options;
  options.on_parameters_wait = [&](uint64_t step, int64_t offset, int64_t length) {
    if (step != 1) return;
    absl::MutexLock lock(&mu);
    waits_of_step_1.emplace_back(offset, length);
    if (offset < first().offset() + first().length() && !waiting_for_first.HasBeenNotified()) {
      waiting_for_first.Notify();
    }
  };
  StartBoth(options);

  // Node 1 pushes step 0 except its first partition (the first layer's first row piece,
  // which backward finishes last): the PS cannot complete that one.
  node1_->Compute(0);
  for (uint32_t p = 1; p < static_cast<uint32_t>(plan_.partitions_size()); ++p) {
    node1_->Push(0, p);
  }
  Running step0;
  RunStepAsync(0, step0);
  const bool step0_returned = step0.done.WaitForNotificationWithTimeout(kHang);
  EXPECT_TRUE(step0_returned) << "RunStep(0) waited for an update the PS could not send yet";
  if (!step0_returned) node1_->Push(0, first().id());  // Let it finish, then fail.
  step0.thread.join();
  ASSERT_TRUE(step0.result.ok()) << step0.result.status();
  ASSERT_TRUE(step0_returned);

  // Step 1's forward computes on every update that came back (the shards answered the
  // last partitions first, the first layer's later row pieces among them) and waits
  // only for what the missing partition holds.
  Running step1;
  RunStepAsync(1, step1);
  const bool reached_first = waiting_for_first.WaitForNotificationWithTimeout(kHang);
  EXPECT_TRUE(reached_first) << "step 1's forward never waited for the first partition";
  EXPECT_FALSE(step1.done.HasBeenNotified());
  {
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(waits_of_step_1.empty());
    for (const auto& [offset, length] : waits_of_step_1) {
      EXPECT_LT(offset, first().offset() + first().length())
          << "the forward waited for [" << offset << ", " << offset + length
          << "), which holds no part of the missing partition";
    }
  }
  node1_->Push(0, first().id());
  node1_->Finish(0);
  step1.thread.join();
  ASSERT_TRUE(step1.result.ok()) << step1.result.status();
  EXPECT_GT(step1.result->parameters_wait_seconds, 0);

  // Steps 2 and 3 in the ordinary way: node 1 pushes whatever it has, at once.
  for (uint64_t step = 1; step < 4; ++step) {
    node1_->Compute(step);
    for (const v1::Partition& partition : plan_.partitions()) node1_->Push(step, partition.id());
    if (step + 1 < 4) {
      absl::StatusOr<StepStats> next = session_->RunStep(step + 1);
      ASSERT_TRUE(next.ok()) << next.status();
    }
    node1_->Finish(step);
  }
  ASSERT_TRUE(session_->FinishUpdate().ok());
  ExpectTheSingleReplicaTraining();
}

// The session's PS connection with its WaitUpdated calls for one step held until
// released (the communication thread stalls there); everything else passes through.
class HeldWaits : public PsConnection {
 public:
  explicit HeldWaits(std::unique_ptr<PsConnection> inner) : inner_(std::move(inner)) {}

  void Hold(uint64_t step) {
    absl::MutexLock lock(&mu_);
    held_ = step;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    held_.reset();
  }

  absl::StatusOr<uint64_t> InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                          const float* params) override {
    return inner_->InitPartitions(spec, total_steps, params);
  }
  absl::StatusOr<uint64_t> PullAll(float* params) override { return inner_->PullAll(params); }
  absl::Status Open() override { return inner_->Open(); }
  absl::Status Push(uint64_t step, uint32_t partition, const float* data, uint64_t samples,
                    uint32_t steps) override {
    return inner_->Push(step, partition, data, samples, steps);
  }
  void ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) override {
    inner_->ExpectUpdateInto(partition, step, dst);
  }
  void SetLandedListener(LandedFn listener) override {
    inner_->SetLandedListener(std::move(listener));
  }
  absl::Status WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                           float* dst) override {
    {
      absl::MutexLock lock(&mu_);
      auto free = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !held_.has_value() || *held_ != step;
      };
      mu_.Await(absl::Condition(&free));
    }
    return inner_->WaitUpdated(partition, step, timeout, dst);
  }
  void Interrupt(const std::string& reason) override {
    Release();
    inner_->Interrupt(reason);
  }
  void Close() override { inner_->Close(); }
  uint64_t bytes_pushed() const override { return inner_->bytes_pushed(); }
  uint64_t bytes_pulled() const override { return inner_->bytes_pulled(); }

 private:
  std::unique_ptr<PsConnection> inner_;
  absl::Mutex mu_;
  std::optional<uint64_t> held_ ABSL_GUARDED_BY(mu_);
};

// A CPU replica that says when each of its passes returned.
class ReportingReplica : public engine::CpuReplica {
 public:
  ReportingReplica(const engine::ModelDef& model, const float* params,
                   std::function<void(uint64_t step)> returned)
      : CpuReplica(model, params), returned_(std::move(returned)) {}
  absl::StatusOr<engine::LossStats> ForwardBackward(const engine::Batch& batch,
                                                    const engine::DropoutKey& key,
                                                    const engine::GradientReadyFn& on_ready) override {
    absl::StatusOr<engine::LossStats> loss = CpuReplica::ForwardBackward(batch, key, on_ready);
    returned_(key.step);
    return loss;
  }

 private:
  std::function<void(uint64_t step)> returned_;
};

// CPU replicas read the host parameters themselves: an update that lands there is the
// forward's to read at once, whether it landed while the step's pushes went out (the
// in-memory shard answers inside node 0's push when node 1 pushed first) or after
// (node 1 pushes last). The communication thread, which takes the update after it
// landed, is held back here: the next forward does not wait for it.
TEST_F(TrainingSessionTest, TheForwardReadsAnUpdateAsItLandsNotWhenTheCommThreadTakesIt) {
  absl::Mutex mu;
  std::map<uint64_t, int> passes_returned;  // Step -> node 0's replicas done with it.
  SessionOptions options;
  options.make_replica = [&](const engine::ModelDef& model, const v1::Device&,
                             float* host) -> absl::StatusOr<std::unique_ptr<engine::Replica>> {
    return std::make_unique<ReportingReplica>(model, host, [&](uint64_t step) {
      absl::MutexLock lock(&mu);
      ++passes_returned[step];
    });
  };
  HeldWaits* held = nullptr;
  StartBoth(options, [&](std::unique_ptr<PsConnection> inner) {
    auto wrapped = std::make_unique<HeldWaits>(std::move(inner));
    held = wrapped.get();
    return wrapped;
  });
  ASSERT_NE(held, nullptr);
  auto both_passes_returned = [&](uint64_t step) {
    absl::MutexLock lock(&mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return passes_returned[step] == 2; };
    return mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(20));
  };

  // Step 0: node 1 pushed first, so every update lands inside node 0's pushes.
  held->Hold(0);
  node1_->Compute(0);
  for (const v1::Partition& partition : plan_.partitions()) node1_->Push(0, partition.id());
  ASSERT_TRUE(session_->RunStep(0).ok());
  Running step1;
  RunStepAsync(1, step1);
  EXPECT_TRUE(both_passes_returned(1))
      << "step 1's forward waited for the communication thread to take step 0's update";
  held->Hold(1);  // Released 0: the communication thread takes it and pushes step 1.
  step1.thread.join();
  ASSERT_TRUE(step1.result.ok()) << step1.result.status();
  node1_->Finish(0);

  // Step 1: node 1 pushes after node 0 (its step returned): the updates land on node
  // 1's pushes, after node 0's gate began to wait for them.
  Running step2;
  RunStepAsync(2, step2);
  node1_->Compute(1);
  for (const v1::Partition& partition : plan_.partitions()) node1_->Push(1, partition.id());
  EXPECT_TRUE(both_passes_returned(2))
      << "step 2's forward waited for the communication thread to take step 1's update";
  held->Release();
  step2.thread.join();
  ASSERT_TRUE(step2.result.ok()) << step2.result.status();
  node1_->Finish(1);

  node1_->Compute(2);
  for (const v1::Partition& partition : plan_.partitions()) node1_->Push(2, partition.id());
  ASSERT_TRUE(session_->RunStep(3).ok());
  node1_->Finish(2);
  node1_->Compute(3);
  for (const v1::Partition& partition : plan_.partitions()) node1_->Push(3, partition.id());
  ASSERT_TRUE(session_->FinishUpdate().ok());
  node1_->Finish(3);
  ExpectTheSingleReplicaTraining();
}

TEST_F(TrainingSessionTest, WithoutOverlapAStepReturnsWithItsUpdateApplied) {
  SessionOptions options;
  options.overlap_updates = false;
  StartBoth(options);
  for (uint64_t step = 0; step < 2; ++step) {
    node1_->Compute(step);
    for (const v1::Partition& partition : plan_.partitions()) node1_->Push(step, partition.id());
    absl::StatusOr<StepStats> stats = session_->RunStep(step);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->parameters_wait_seconds, 0);  // Nothing left for the forward to wait for.
    // Where the step went: the replica's pass split at its first gradient, the leader's
    // pushes, no host<->device copies on a CPU replica.
    EXPECT_GT(stats->forward_seconds, 0);
    EXPECT_GT(stats->backward_seconds, 0);
    ASSERT_FALSE(stats->replica_seconds.empty());
    const double slowest =
        *std::max_element(stats->replica_seconds.begin(), stats->replica_seconds.end());
    EXPECT_LE(stats->forward_seconds + stats->backward_seconds, slowest + 1e-9);
    EXPECT_GT(stats->push_seconds, 0);
    EXPECT_EQ(stats->copy_seconds, 0);
    node1_->Finish(step);
    // No FinishUpdate: the step's update is already in.
    EXPECT_EQ(session_->parameters(), node1_->parameters()) << "after step " << step;
  }
}

TEST_F(TrainingSessionTest, AnUpdateThatNeverComesFailsTheStepThatNeedsIt) {
  SessionOptions options;
  options.update_timeout = absl::Seconds(1);
  StartBoth(options);
  node1_->Compute(0);
  for (uint32_t p = 0; p + 1 < static_cast<uint32_t>(plan_.partitions_size()); ++p) {
    node1_->Push(0, p);
  }
  absl::StatusOr<StepStats> step0 = session_->RunStep(0);
  ASSERT_TRUE(step0.ok()) << step0.status();
  const uint64_t pushed = session_->bytes_pushed();

  absl::StatusOr<StepStats> step1 = session_->RunStep(1);
  ASSERT_FALSE(step1.ok());
  EXPECT_EQ(step1.status().code(), absl::StatusCode::kDeadlineExceeded) << step1.status();
  EXPECT_THAT(step1.status().message(),
              HasSubstr(absl::StrCat("partition ", last().id(), " got no update")));
  EXPECT_EQ(session_->bytes_pushed(), pushed) << "step 1 pushed gradients of stale parameters";
  // Sticky: whatever needs the parameters next reports the same error.
  EXPECT_EQ(session_->FinishUpdate().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(session_->Evaluate().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(session_->RunStep(2).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(TrainingSessionTest, AnInterruptionWhileTheUpdateIsPendingSurfacesFromTheDrain) {
  StartBoth(SessionOptions());
  node1_->Compute(0);
  for (uint32_t p = 0; p + 1 < static_cast<uint32_t>(plan_.partitions_size()); ++p) {
    node1_->Push(0, p);
  }
  ASSERT_TRUE(session_->RunStep(0).ok());
  session_->Interrupt("new generation 2");
  absl::Status drained = session_->FinishUpdate();
  EXPECT_EQ(drained.code(), absl::StatusCode::kAborted) << drained;
  EXPECT_THAT(drained.message(), HasSubstr("update of step 0 interrupted: new generation 2"));
}

TEST_F(TrainingSessionTest, AnInterruptionAfterTheUpdateArrivedStillAppliesIt) {
  StartBoth(SessionOptions());
  node1_->Compute(0);
  for (const v1::Partition& partition : plan_.partitions()) node1_->Push(0, partition.id());
  // The in-memory shard completes each partition inside the session's push: by the
  // time RunStep returns, every update has arrived.
  ASSERT_TRUE(session_->RunStep(0).ok());
  session_->Interrupt("shutting down");
  EXPECT_TRUE(session_->FinishUpdate().ok()) << "an update that arrived is applied";
  node1_->Finish(0);
  EXPECT_EQ(session_->parameters(), node1_->parameters());
}

// JobSpec.init_from: the session starts from the given parameters instead of the
// seed's, and installs them on the PS; a file of another size is refused, named.
TEST_F(TrainingSessionTest, InitialParametersReplaceTheSeedsAndMustFitTheModel) {
  SessionOptions options;
  options.ps_connection = [this](const PsIdentity& identity, const v1::PartitionPlan& plan) {
    return std::make_unique<InMemoryPsConnection>(std::vector<ps::ParameterShard*>{&shard_},
                                                  identity, plan, v1::SYNC, v1::FLOAT32);
  };
  v1::Assignment assignment = NodeZero(spec_);
  assignment.mutable_job()->set_init_from("/data/trained.f32");
  options.initial_parameters = std::make_shared<const std::vector<float>>(7, 0.5f);
  absl::StatusOr<std::unique_ptr<TrainingSession>> refused =
      TrainingSession::Create(assignment, data_, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("init_from /data/trained.f32 holds 7 float32 values"));

  absl::StatusOr<engine::ModelDef> model = engine::BuildModel(spec_.model());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> trained(model->num_parameters);
  for (size_t i = 0; i < trained.size(); ++i) trained[i] = 0.001f * static_cast<float>(i % 97);
  options.initial_parameters = std::make_shared<const std::vector<float>>(trained);
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::Create(assignment, data_, options);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->parameters(), trained);
}

// A replica that keeps its parameters apart from the worker's host buffer, as a GPU
// replica keeps them on the device, computing through a CPU replica over its own copy;
// it counts the elements that cross between the two. `stages`: like a GPU replica, it
// leaves downloaded gradients in a host buffer of its own (StageGradients) and never
// reads the worker's host buffer in a pass.
class ApartReplica : public engine::Replica {
 public:
  ApartReplica(const engine::ModelDef& model, const float* host, bool stages = false)
      : params_(host, host + model.num_parameters), inner_(model, params_.data()),
        stages_(stages) {}

  const engine::ModelDef& model() const override { return inner_.model(); }
  bool DoneWithParametersWhenReady() const override { return stages_; }
  absl::StatusOr<const float*> StageGradients(int64_t offset, int64_t length) override {
    if (!stages_) return engine::Replica::StageGradients(offset, length);
    {
      absl::MutexLock lock(&mu_);
      if (prefetched_.erase({offset, length}) == 0) ++staged_unprefetched;
    }
    staging_.resize(params_.size());
    float* into = given_ != nullptr ? given_ : staging_.data();
    if (absl::Status s = inner_.CopyGradients(offset, length, into + offset); !s.ok()) {
      return s;
    }
    staged += length;
    if (given_ != nullptr) staged_into_given += length;
    return into + offset;
  }
  // As a GPU replica starts a download: noted, with a check that the pass reported the
  // range ready before (the prefetch must not read gradients still being computed).
  absl::Status PrefetchGradients(int64_t offset, int64_t length) override {
    absl::MutexLock lock(&mu_);
    if (offset < ready_from_) ++prefetched_before_ready;
    prefetched_.insert({offset, length});
    prefetched += length;
    return absl::OkStatus();
  }
  // As a GPU replica: its downloads for pushes go to the given buffer.
  bool UseGradientBuffer(float* buffer) override {
    if (!stages_ || buffer == nullptr) return false;
    given_ = buffer;
    return true;
  }
  std::string device() const override { return "apart:0"; }
  absl::Status SetParameters(const float* host, int64_t offset, int64_t length) override {
    std::copy(host + offset, host + offset + length, params_.begin() + offset);
    uploaded += length;
    return absl::OkStatus();
  }
  absl::StatusOr<engine::LossStats> ForwardBackward(const engine::Batch& batch,
                                                    const engine::DropoutKey& key,
                                                    const engine::GradientReadyFn& on_ready) override {
    inner_.set_parameters_needed(parameters_needed_);
    {
      absl::MutexLock lock(&mu_);
      ready_from_ = params_.size();
      prefetched_.clear();  // A download of the previous pass is never staged in this one.
    }
    return inner_.ForwardBackward(batch, key,
                                  [this, &on_ready](int tensor, int64_t offset, int64_t length) {
                                    {
                                      absl::MutexLock lock(&mu_);
                                      ready_from_ = std::min(ready_from_, offset);
                                    }
                                    if (on_ready) on_ready(tensor, offset, length);
                                  });
  }
  absl::StatusOr<engine::LossStats> Evaluate(const engine::Batch& batch) override {
    return inner_.Evaluate(batch);
  }
  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override {
    downloaded += length;
    return inner_.CopyGradients(offset, length, dst);
  }
  bool AppliesInnerUpdate() const override { return true; }
  absl::Status InnerUpdate(const UpdateCoefficients& c, int slots, int64_t offset, int64_t length,
                           float divisor) override {
    if (inner_updates == fail_at_update) return absl::InternalError("the device fell off the bus");
    if (state_.empty()) state_.assign(static_cast<size_t>(slots) * params_.size(), 0.0f);
    const float* gradients = inner_.host_gradients();
    float* state = state_.data() + offset * slots;
    for (int64_t i = 0; i < length; ++i) {
      params_[offset + i] =
          StepOf(c, params_[offset + i], gradients[offset + i] / divisor, state, i, length);
    }
    ++inner_updates;
    inner_update_threads.push_back(std::this_thread::get_id());
    return absl::OkStatus();
  }
  absl::Status CopyParameters(int64_t offset, int64_t length, float* dst) override {
    std::copy(params_.begin() + offset, params_.begin() + offset + length, dst);
    downloaded += length;
    return absl::OkStatus();
  }

  int64_t uploaded = 0;
  int64_t downloaded = 0;
  int64_t staged = 0;
  int64_t staged_into_given = 0;
  int64_t prefetched = 0;           // Elements PrefetchGradients was asked for.
  int staged_unprefetched = 0;      // StageGradients of a range this pass did not prefetch.
  int prefetched_before_ready = 0;  // PrefetchGradients of a range not yet reported ready.
  int inner_updates = 0;
  std::vector<std::thread::id> inner_update_threads;  // Of each InnerUpdate call.
  int fail_at_update = -1;  // The InnerUpdate call (from 0) that fails, if any.

 private:
  float* given_ = nullptr;
  absl::Mutex mu_;  // The replica's thread reports ready; the communication thread prefetches.
  int64_t ready_from_ ABSL_GUARDED_BY(mu_) = 0;  // This pass: gradients [x, end) reported.
  std::set<std::pair<int64_t, int64_t>> prefetched_ ABSL_GUARDED_BY(mu_);  // This pass's.
  std::vector<float> params_;
  std::vector<float> state_;
  engine::CpuReplica inner_;
  bool stages_;
  std::vector<float> staging_;
};

// A CPU replica that notes the thread of every read of its gradients (StageGradients,
// CopyGradients).
class GradientReadRecordingReplica : public engine::CpuReplica {
 public:
  GradientReadRecordingReplica(const engine::ModelDef& model, const float* params,
                               std::vector<std::thread::id>* readers)
      : CpuReplica(model, params), readers_(readers) {}
  absl::StatusOr<const float*> StageGradients(int64_t offset, int64_t length) override {
    readers_->push_back(std::this_thread::get_id());
    return CpuReplica::StageGradients(offset, length);
  }
  absl::Status CopyGradients(int64_t offset, int64_t length, float* dst) override {
    readers_->push_back(std::this_thread::get_id());
    return CpuReplica::CopyGradients(offset, length, dst);
  }

 private:
  std::vector<std::thread::id>* readers_;
};

// One node of one replica over 10 steps, the shard in memory: LOCAL_SGD with rounds of
// 4 (rounds end after steps 3, 7 and 9), or SYNC. make_replica: unset for the CPU
// replica. `real`: the session's own PS client to that shard instead, over its local
// socket, with `shared_memory` (--ps_shared_memory).
struct LocalSgdRun {
  std::vector<float> parameters;
  ApartReplica* apart = nullptr;  // Owned by the session, which is gone: counts only.
  int64_t uploaded = 0, downloaded = 0, staged = 0, staged_into_given = 0, prefetched = 0;
  int staged_unprefetched = 0, prefetched_before_ready = 0;
  int inner_updates = 0;
  bool in_node_region = false;
  // The thread that called RunStep; with `apart`, the thread of every inner step on
  // the replica; with `record_reads` (and not `apart`), of every gradient read.
  std::thread::id runner;
  std::vector<std::thread::id> inner_update_threads;
  std::vector<std::thread::id> gradient_readers;
};

// The assignment of a job of 10 steps (LOCAL_SGD: rounds of 4) to one node of one
// process with one replica on a device of `kind`.
v1::Assignment OneNodeOfOneReplica(v1::TrainingMode mode, v1::DeviceKind kind) {
  v1::JobSpec spec = Spec();
  spec.set_mode(mode);
  if (mode == v1::LOCAL_SGD) spec.set_sync_every(4);
  spec.set_max_steps(10);
  spec.set_nodes_min(1);
  spec.set_replicas_per_worker(1);
  spec = WithDefaults(spec);
  v1::Assignment a = NodeZero(spec);
  a.set_world_size(1);
  a.set_num_nodes(1);
  a.clear_devices();
  v1::Device* device = a.add_devices();
  device->set_kind(kind);
  device->set_index(kind == v1::GPU ? 0 : -1);
  device->set_name(kind == v1::GPU ? "apart:0" : "cpu");
  a.set_replicas(1);
  a.set_total_replicas(1);
  a.set_node_replicas(1);
  return a;
}

LocalSgdRun RunLocalSgd(const engine::Datasets& data, bool apart,
                        v1::TrainingMode mode = v1::LOCAL_SGD, bool stages = false,
                        ps::testing::InProcessShard* real = nullptr, bool shared_memory = true,
                        v1::DeviceKind kind = v1::CPU, bool record_reads = false,
                        const std::function<void()>& while_open = nullptr) {
  v1::Assignment a = OneNodeOfOneReplica(mode, kind);
  ps::ParameterShard shard(ps::ShardOptions{}, nullptr);
  SessionOptions options;
  options.update_timeout = kHang;
  if (real != nullptr) {
    // Installed outside any generation: the shard forms generation 0 for it.
    a.set_generation(0);
    a.clear_shards();
    *a.add_shards() = real->info(0);
    options.ps_transport = PsTransport::kLocal;
    options.ps_shared_memory = shared_memory;
  } else {
    options.ps_connection = [&shard, mode](const PsIdentity& identity,
                                           const v1::PartitionPlan& plan) {
      return std::make_unique<InMemoryPsConnection>(std::vector<ps::ParameterShard*>{&shard},
                                                    identity, plan, mode, v1::FLOAT32);
    };
  }
  LocalSgdRun run;
  if (apart) {
    options.make_replica = [&run, stages](const engine::ModelDef& model, const v1::Device&,
                                          float* host)
        -> absl::StatusOr<std::unique_ptr<engine::Replica>> {
      auto replica = std::make_unique<ApartReplica>(model, host, stages);
      run.apart = replica.get();
      return replica;
    };
  } else if (record_reads) {
    options.make_replica = [&run](const engine::ModelDef& model, const v1::Device&, float* host)
        -> absl::StatusOr<std::unique_ptr<engine::Replica>> {
      return std::make_unique<GradientReadRecordingReplica>(model, host, &run.gradient_readers);
    };
  }
  run.runner = std::this_thread::get_id();
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::Create(a, data, options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  run.in_node_region = (*session)->in_node_region();
  absl::StatusOr<uint64_t> first = (*session)->Prepare();
  EXPECT_TRUE(first.ok()) << first.status();
  for (uint64_t step = 0; step < 10; ++step) {
    absl::StatusOr<StepStats> stats = (*session)->RunStep(step);
    EXPECT_TRUE(stats.ok()) << "step " << step << ": " << stats.status();
    if (!stats.ok()) return run;
  }
  EXPECT_TRUE((*session)->FinishUpdate().ok());
  if (while_open) while_open();
  run.parameters = (*session)->parameters();
  if (run.apart != nullptr) {
    run.uploaded = run.apart->uploaded;
    run.downloaded = run.apart->downloaded;
    run.staged = run.apart->staged;
    run.staged_into_given = run.apart->staged_into_given;
    run.prefetched = run.apart->prefetched;
    run.staged_unprefetched = run.apart->staged_unprefetched;
    run.prefetched_before_ready = run.apart->prefetched_before_ready;
    run.inner_updates = run.apart->inner_updates;
    run.inner_update_threads = run.apart->inner_update_threads;
  }
  return run;
}

// An inner step that fails inside a round (the replica's device gone) fails its step, and
// sticks: the next step, FinishUpdate and Evaluate report it too, and nothing is pushed.
TEST(LocalSgdOnTheReplicaTest, AFailedInnerStepInsideARoundFailsItsStepAndSticks) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  const v1::Assignment a = OneNodeOfOneReplica(v1::LOCAL_SGD, v1::GPU);
  ps::ParameterShard shard(ps::ShardOptions{}, nullptr);
  SessionOptions options;
  options.update_timeout = kHang;
  options.ps_connection = [&shard](const PsIdentity& identity, const v1::PartitionPlan& plan) {
    return std::make_unique<InMemoryPsConnection>(std::vector<ps::ParameterShard*>{&shard},
                                                  identity, plan, v1::LOCAL_SGD, v1::FLOAT32);
  };
  options.make_replica = [](const engine::ModelDef& model, const v1::Device&, float* host)
      -> absl::StatusOr<std::unique_ptr<engine::Replica>> {
    auto replica = std::make_unique<ApartReplica>(model, host);
    replica->fail_at_update = 1;  // Step 1's (one call over every partition inside a round).
    return replica;
  };
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::Create(a, *data, options);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Prepare().ok());
  ASSERT_TRUE((*session)->RunStep(0).ok());
  const uint64_t pushed = (*session)->bytes_pushed();
  absl::StatusOr<StepStats> step1 = (*session)->RunStep(1);
  ASSERT_FALSE(step1.ok());
  EXPECT_EQ(step1.status().code(), absl::StatusCode::kInternal) << step1.status();
  EXPECT_THAT(step1.status().message(), HasSubstr("fell off the bus"));
  EXPECT_EQ((*session)->FinishUpdate().code(), absl::StatusCode::kInternal);
  EXPECT_EQ((*session)->Evaluate().status().code(), absl::StatusCode::kInternal);
  // Steps 2 and 3 (the round's end, which would push) fail before they compute.
  EXPECT_EQ((*session)->RunStep(2).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ((*session)->RunStep(3).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ((*session)->bytes_pushed(), pushed);
}

// Inside a LOCAL_SGD round (rounds of 4: they end after steps 3, 7 and 9) a node of one
// process and one replica has nothing to reduce or push: RunStep's own thread takes the
// inner step before it returns, reading the replica's gradient where it lies, with no
// hand-off to the communication thread. A round's end still goes through that thread
// (the push, the PS's values). Both on the host and on a replica that keeps its
// parameters (a GPU).
TEST(LocalSgdOnTheReplicaTest, InsideARoundRunStepsOwnThreadTakesTheInnerStep) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  const int partitions =
      MakePartitionPlan(engine::BuildModel(spec.model())->Layout(), spec.partition_bytes(), 1,
                        spec.partition_cut())
          ->partitions_size();
  auto round_end = [](size_t step) { return step == 3 || step == 7 || step == 9; };
  const LocalSgdRun host = RunLocalSgd(*data, /*apart=*/false, v1::LOCAL_SGD, false, nullptr,
                                       true, v1::CPU, /*record_reads=*/true);
  const LocalSgdRun apart = RunLocalSgd(*data, /*apart=*/true);
  // `calls_inside`: the calls a step inside a round makes (a round's end: one per
  // partition).
  auto expect_threads = [&](const char* what, const LocalSgdRun& run,
                            const std::vector<std::thread::id>& threads, int calls_inside) {
    size_t i = 0;
    for (size_t step = 0; step < 10; ++step) {
      const int calls = round_end(step) ? partitions : calls_inside;
      for (int call = 0; call < calls; ++call, ++i) {
        ASSERT_LT(i, threads.size()) << what << ", step " << step;
        if (round_end(step)) {
          EXPECT_NE(threads[i], run.runner) << what << ", step " << step << " (a round's end)";
        } else {
          EXPECT_EQ(threads[i], run.runner) << what << ", step " << step;
        }
      }
    }
    EXPECT_EQ(i, threads.size()) << what;
  };
  expect_threads("gradient reads on the host", host, host.gradient_readers, partitions);
  expect_threads("inner steps on the replica", apart, apart.inner_update_threads, 1);
  // The host path reads each gradient in place inside a round (StageGradients) and
  // copies it at a round's end: the same bits as the replica's own inner step (as in
  // InnerStepsStayOnTheReplicaAndGiveTheHostPathsBits).
  const int64_t n = static_cast<int64_t>(host.parameters.size());
  ASSERT_EQ(apart.parameters.size(), host.parameters.size());
  EXPECT_EQ(std::memcmp(host.parameters.data(), apart.parameters.data(), n * sizeof(float)), 0);
}

TEST(LocalSgdOnTheReplicaTest, InnerStepsStayOnTheReplicaAndGiveTheHostPathsBits) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  const LocalSgdRun host = RunLocalSgd(*data, /*apart=*/false);
  const LocalSgdRun apart = RunLocalSgd(*data, /*apart=*/true);
  ASSERT_FALSE(host.parameters.empty());
  ASSERT_EQ(apart.parameters.size(), host.parameters.size());
  const int64_t n = static_cast<int64_t>(host.parameters.size());
  size_t differing = 0;
  for (int64_t i = 0; i < n; ++i) {
    differing += std::memcmp(&host.parameters[i], &apart.parameters[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differing, 0u) << "of " << n << " parameters";
  // Uploads: the whole model at Prepare and after each of the 3 rounds. Downloads: the
  // node's values at each round's end, never a gradient.
  EXPECT_EQ(apart.uploaded, 4 * n);
  EXPECT_EQ(apart.downloaded, 3 * n);
  // Every step takes its inner step on the replica: inside a round in one call over every
  // partition (momentum keeps one state slot per element), at a round's end (steps 3, 7
  // and 9) partition by partition, as it pushes them.
  const v1::PartitionPlan plan = *MakePartitionPlan(
      engine::BuildModel(spec.model())->Layout(), spec.partition_bytes(), 1, spec.partition_cut());
  ASSERT_GT(plan.partitions_size(), 1);
  EXPECT_EQ(apart.inner_updates, 7 + 3 * plan.partitions_size());
  // And training moved the parameters.
  std::vector<float> initial(n);
  engine::InitParameters(*engine::BuildModel(spec.model()), spec.seed(), initial.data());
  EXPECT_NE(host.parameters, initial);
}

// SYNC with a replica that keeps parameters and gradients apart (a GPU replica): with
// staging, every gradient is pushed from the replica's own host memory and no step
// copies one into the worker's buffer; without it, each is copied as before. Both give
// the CPU replica's bits.
TEST(SyncOnAReplicaApartTest, PushesFromTheReplicasStagingAndGivesTheHostPathsBits) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  const LocalSgdRun host = RunLocalSgd(*data, /*apart=*/false, v1::SYNC);
  const LocalSgdRun staged = RunLocalSgd(*data, /*apart=*/true, v1::SYNC, /*stages=*/true);
  const LocalSgdRun copied = RunLocalSgd(*data, /*apart=*/true, v1::SYNC, /*stages=*/false);
  ASSERT_FALSE(host.parameters.empty());
  const int64_t n = static_cast<int64_t>(host.parameters.size());
  for (const LocalSgdRun* run : {&staged, &copied}) {
    ASSERT_EQ(run->parameters.size(), host.parameters.size());
    EXPECT_EQ(std::memcmp(run->parameters.data(), host.parameters.data(), n * sizeof(float)), 0);
    // The whole model at Prepare, then every step's update.
    EXPECT_EQ(run->uploaded, 11 * n);
  }
  EXPECT_EQ(staged.staged, 10 * n);
  EXPECT_EQ(staged.downloaded, 0);
  EXPECT_EQ(copied.staged, 0);
  EXPECT_EQ(copied.downloaded, 10 * n);
  // Every staged range's download was started ahead in its pass, once the pass had
  // reported it ready (a GPU replica's downloads then run back to back); copies are not.
  EXPECT_EQ(staged.prefetched, 10 * n);
  EXPECT_EQ(staged.staged_unprefetched, 0);
  EXPECT_EQ(staged.prefetched_before_ready, 0);
  EXPECT_EQ(copied.prefetched, 0);
}

// The session's own PS client to a shard in this process, over its local socket: on
// a node of one CPU replica in SYNC the parameters and the replica's gradients live in
// the node's region, which the client hands the shard (pushes go from where backward
// wrote them, the shard writes each update into the parameters). The same bits as the
// in-memory PS, and as the same client with shared memory off (each lane's own slots).
TEST(NodeRegionTest, ParametersAndGradientsSharedWithTheShardGiveTheSameBits) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  const LocalSgdRun reference = RunLocalSgd(*data, /*apart=*/false, v1::SYNC);
  ASSERT_FALSE(reference.parameters.empty());
  EXPECT_FALSE(reference.in_node_region) << "an in-memory PS: nothing to share with";
  for (const bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared memory" : "no shared memory");
    ps::testing::InProcessShard shard;
    ASSERT_TRUE(shard.Start().ok());
    const LocalSgdRun run =
        RunLocalSgd(*data, /*apart=*/false, v1::SYNC, /*stages=*/false, &shard, shared);
    EXPECT_EQ(run.in_node_region, shared);
    ASSERT_EQ(run.parameters.size(), reference.parameters.size());
    EXPECT_EQ(std::memcmp(run.parameters.data(), reference.parameters.data(),
                          reference.parameters.size() * sizeof(float)),
              0);
  }
  // A replica that keeps parameters and gradients apart (a GPU's): it stages every
  // download for a push in the region, pushed from there, and uploads the parameters
  // the shard wrote there; the same bits.
  {
    ps::testing::InProcessShard shard;
    ASSERT_TRUE(shard.Start().ok());
    const LocalSgdRun apart = RunLocalSgd(*data, /*apart=*/true, v1::SYNC, /*stages=*/true,
                                          &shard, /*shared_memory=*/true, v1::GPU);
    EXPECT_TRUE(apart.in_node_region);
    const int64_t n = static_cast<int64_t>(reference.parameters.size());
    EXPECT_EQ(apart.staged_into_given, 10 * n);
    EXPECT_EQ(apart.prefetched, 10 * n);
    EXPECT_EQ(apart.staged_unprefetched, 0);
    EXPECT_EQ(apart.downloaded, 0) << "no gradient copied into the worker's buffer";
    ASSERT_EQ(apart.parameters.size(), reference.parameters.size());
    EXPECT_EQ(std::memcmp(apart.parameters.data(), reference.parameters.data(), n * sizeof(float)),
              0);
  }
  // Not for LOCAL_SGD (it pushes the round's change from a buffer of its own).
  ps::testing::InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  EXPECT_FALSE(RunLocalSgd(*data, false, v1::LOCAL_SGD, false, &shard, true).in_node_region);
}

// The threads on a step's chain of hand-offs, the session's and its PS client's and
// the shard's, ask for the process's short scheduler slice (common/thread_slice.h);
// the compute threads keep the kernel's.
TEST(NodeRegionTest, TheStepsHandoffThreadsRunWithTheShortSliceAndComputeThreadsDoNot) {
  absl::StatusOr<absl::Duration> kernel_default = ThreadSlice();
  ASSERT_TRUE(kernel_default.ok()) << kernel_default.status();
  const absl::Duration slice = absl::Microseconds(100);
  absl::StatusOr<absl::Duration> probe;
  std::thread([&] { probe = RequestThreadSlice(slice); }).join();
  if (!probe.ok() || *probe != slice) {
    GTEST_SKIP() << "this kernel keeps no slice per thread (< 6.12), or refused it: "
                 << (probe.ok() ? absl::FormatDuration(*probe) : probe.status().ToString());
  }
  ASSERT_NE(*kernel_default, slice);
  ASSERT_TRUE(SetHandoffSlice(slice).ok());
  const v1::JobSpec spec = Spec();
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(spec.dataset(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  ps::testing::InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  std::map<std::string, std::vector<absl::Duration>> slices;  // By thread name.
  RunLocalSgd(
      *data, /*apart=*/false, v1::SYNC, /*stages=*/false, &shard, /*shared_memory=*/true, v1::CPU,
      /*record_reads=*/false, [&] {
        std::error_code ignored;
        for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ignored)) {
          std::ifstream comm(task.path() / "comm");
          std::string name;
          std::getline(comm, name);
          absl::StatusOr<absl::Duration> kept =
              ThreadSlice(static_cast<pid_t>(std::stol(task.path().filename())));
          if (kept.ok()) slices[name].push_back(*kept);
        }
      });
  ASSERT_TRUE(SetHandoffSlice(absl::ZeroDuration()).ok());
  for (const char* handoff : {"push", "lane-read", "shard-read", "shard-write", "ps-apply-0"}) {
    SCOPED_TRACE(handoff);
    ASSERT_FALSE(slices[handoff].empty()) << "no such thread while the session was open";
    for (const absl::Duration kept : slices[handoff]) EXPECT_EQ(kept, slice);
  }
  // The replica's product threads (one per core beyond the first), and the test's own.
  std::string main_name;
  std::getline(std::ifstream("/proc/self/comm"), main_name);
  for (const auto& [name, kept] : slices) {
    if (name.rfind("matmul-", 0) != 0 && name != main_name) continue;
    for (const absl::Duration k : kept) EXPECT_EQ(k, *kernel_default) << name;
  }
  EXPECT_FALSE(slices[main_name].empty()) << "the test's own threads are listed";
}

}  // namespace
}  // namespace tributary::worker
