// Over 600 lines on purpose: the facade's end-to-end rules share one fixture (fake
// clock, fake shards, registration helpers); each part has its own small test.
// The coordinator's core driven directly, with a fake clock and in-memory fake PS
// shards: generations forming (settle window, nodes_min/max, late registration),
// assignments, failure detection and re-forming, job-level failure rules, progress
// and completion, job control, persistence across a restart, and the shard protocol.
#include "services/coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/coordinator/history_file.h"
#include "services/coordinator/testing/fake_shards.h"

namespace tributary::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Device Gpu(int index, const std::string& node) {
  v1::Device device;
  device.set_kind(v1::GPU);
  device.set_index(index);
  device.set_uuid(absl::StrCat("GPU-", node, "-", index));
  device.set_name("NVIDIA H100");
  return device;
}

v1::Device Cpu() {
  v1::Device device;
  device.set_kind(v1::CPU);
  device.set_index(-1);
  device.set_cpu_cores(4);
  return device;
}

v1::JobSpec Spec(uint32_t nodes_min, uint32_t nodes_max, v1::DeviceKind devices = v1::AUTO) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_samples(1000);
  spec.set_global_batch_size(100);
  spec.set_epochs(2);
  spec.set_nodes_min(nodes_min);
  spec.set_nodes_max(nodes_max);
  spec.set_devices(devices);
  return spec;
}

struct Reply {
  bool called = false;
  absl::Status status;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() { Make(); }

  static CoordinatorOptions Options() {
    CoordinatorOptions options;
    options.ps_shards = 2;
    options.heartbeat_interval = absl::Seconds(1);
    options.heartbeat_timeout = absl::Seconds(10);
    options.settle_window = absl::Seconds(2);
    options.formation_retry = absl::Seconds(1);
    options.version = "test";
    return options;
  }

  void Make(CoordinatorOptions options = Options()) {
    coordinator_.reset();
    coordinator_ = std::make_unique<Coordinator>(std::move(options), &clock_, &shards_);
    ASSERT_TRUE(coordinator_->Start().ok());
  }

  void RegisterShards(int count = 2) {
    for (int i = 0; i < count; ++i) {
      v1::RegisterParameterServerRequest request;
      request.set_address(absl::StrCat("ps", i, ":1"));
      request.set_shard_index(i);
      v1::RegisterParameterServerResponse reply;
      Reply r;
      coordinator_->HandleRegisterParameterServer(request, &reply, Done(r));
      ASSERT_TRUE(r.status.ok()) << r.status;
    }
  }

  static ReplyCallback Done(Reply& reply) {
    return [&reply](absl::Status status) {
      EXPECT_FALSE(reply.called) << "reply callback ran twice";
      reply.called = true;
      reply.status = std::move(status);
    };
  }

  // Registers and returns the answer (a deferred answer is collected with a Tick).
  absl::StatusOr<v1::RegisterWorkerResponse> Register(const std::string& node,
                                                      std::vector<v1::Device> devices,
                                                      uint32_t port = 0) {
    v1::RegisterWorkerRequest request;
    request.set_node_name(node);
    request.set_host("host-" + node);
    request.set_grpc_port(port == 0 ? ++next_port_ : port);
    for (v1::Device& device : devices) *request.add_devices() = device;
    v1::RegisterWorkerResponse reply;
    Reply r;
    coordinator_->HandleRegisterWorker(request, &reply, Done(r));
    if (!r.called) coordinator_->Tick();
    EXPECT_TRUE(r.called);
    if (!r.status.ok()) return r.status;
    return reply;
  }

  std::string MustRegister(const std::string& node, std::vector<v1::Device> devices = {Cpu()}) {
    absl::StatusOr<v1::RegisterWorkerResponse> reply = Register(node, std::move(devices));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? reply->worker_id() : "";
  }

  v1::HeartbeatResponse Beat(const std::string& worker, uint64_t generation,
                             v1::WorkerPhase phase = v1::WORKER_TRAINING, uint64_t step = 0,
                             const std::string& error = "", float loss = 1.0f) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_generation(generation);
    request.set_phase(phase);
    request.set_step(step);
    request.set_loss(loss);
    request.set_test_accuracy(-1);
    request.set_samples_per_second(100);
    request.set_step_seconds(0.1);
    request.set_error(error);
    request.set_steps_per_epoch(10);
    request.set_total_steps(20);
    request.set_bytes_pushed(1000);
    v1::HeartbeatResponse reply;
    Reply r;
    coordinator_->HandleHeartbeat(request, &reply, Done(r));
    EXPECT_TRUE(r.called);
    last_heartbeat_status_ = r.status;
    return reply;
  }

  v1::Job Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::Job job;
    Reply r;
    coordinator_->HandleSubmitJob(request, &job, Done(r));
    EXPECT_TRUE(r.status.ok()) << r.status;
    return job;
  }

  absl::StatusOr<v1::Job> Control(const std::string& what, const std::string& reason = "") {
    v1::JobControlRequest request;
    request.set_reason(reason);
    v1::Job job;
    Reply r;
    if (what == "pause") coordinator_->HandlePauseJob(request, &job, Done(r));
    if (what == "resume") coordinator_->HandleResumeJob(request, &job, Done(r));
    if (what == "stop") coordinator_->HandleStopJob(request, &job, Done(r));
    if (!r.status.ok()) return r.status;
    return job;
  }

  v1::Job GetJob() {
    v1::Job job;
    Reply r;
    coordinator_->HandleGetJob(v1::GetJobRequest(), &job, Done(r));
    EXPECT_TRUE(r.status.ok()) << r.status;
    return job;
  }

  // Heartbeats every listed worker (acting in `generation`) so none times out.
  std::map<std::string, v1::HeartbeatResponse> BeatAll(const std::vector<std::string>& workers,
                                                       uint64_t generation,
                                                       v1::WorkerPhase phase = v1::WORKER_TRAINING,
                                                       uint64_t step = 0) {
    std::map<std::string, v1::HeartbeatResponse> replies;
    for (const std::string& worker : workers)
      replies[worker] = Beat(worker, generation, phase, step);
    return replies;
  }

  std::string Events() {
    std::string all;
    const v1::Job job = GetJob();
    for (const v1::JobEvent& event : job.events()) {
      absl::StrAppend(&all, v1::JobState_Name(event.from_state()), "->",
                      v1::JobState_Name(event.to_state()), ": ", event.reason(), "\n");
    }
    return all;
  }

  FakeClock clock_;
  FakeShards shards_;
  std::unique_ptr<Coordinator> coordinator_;
  uint32_t next_port_ = 5000;
  absl::Status last_heartbeat_status_;
};

TEST_F(CoordinatorTest, TwoNodesTwoGpusEachGetDistinctGpusAndConsistentRanks) {
  RegisterShards();
  // Workers register before the job exists.
  const std::string a1 = MustRegister("a", {Gpu(0, "a"), Gpu(1, "a")});
  const std::string b1 = MustRegister("b", {Gpu(0, "b"), Gpu(1, "b")});
  const std::string a2 = MustRegister("a", {Gpu(0, "a"), Gpu(1, "a")});
  const std::string b2 = MustRegister("b", {Gpu(0, "b"), Gpu(1, "b")});
  EXPECT_EQ(Beat(a1, 0).action(), v1::ACTION_WAIT);
  EXPECT_THAT(Beat(a1, 0).message(), HasSubstr("no active job"));

  const v1::Job job = Submit(Spec(2, 2, v1::GPU));
  EXPECT_EQ(job.state(), v1::PENDING);
  coordinator_->Tick();  // nodes_max present: no settle wait.

  std::map<std::string, v1::Assignment> got;
  for (const std::string& w : {a1, a2, b1, b2}) {
    const v1::HeartbeatResponse reply = Beat(w, 0, v1::WORKER_IDLE);
    ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS) << reply.message();
    got[w] = reply.assignment();
  }
  EXPECT_EQ(got[a1].generation(), 1u);
  EXPECT_EQ(got[a1].job_id(), job.job_id());
  EXPECT_EQ(got[a1].global_rank(), 0u);
  EXPECT_EQ(got[b1].global_rank(), 2u);
  EXPECT_EQ(got[a2].global_rank(), 1u);
  EXPECT_EQ(got[b2].global_rank(), 3u);
  EXPECT_EQ(got[a1].node_rank(), 0u);
  EXPECT_EQ(got[b2].node_rank(), 1u);
  EXPECT_TRUE(got[b1].node_leader());
  EXPECT_FALSE(got[b2].node_leader());
  EXPECT_NE(got[a1].devices(0).uuid(), got[a2].devices(0).uuid());
  EXPECT_NE(got[b1].devices(0).uuid(), got[b2].devices(0).uuid());
  EXPECT_EQ(got[a1].rendezvous_id(), got[a2].rendezvous_id());
  EXPECT_NE(got[a1].rendezvous_id(), got[b1].rendezvous_id());
  EXPECT_TRUE(coordinator_->rendezvous().IsOpen(got[a1].rendezvous_id()));
  EXPECT_EQ(got[a1].shards_size(), 2);
  EXPECT_EQ(got[a1].shards(1).address(), "ps1:1");
  EXPECT_EQ(got[a1].job().replicas_per_worker(), 1u) << "the spec comes with defaults";
  EXPECT_EQ(got[a1].job().partition_bytes(), 4 << 20);
  EXPECT_EQ(got[a1].resume_step(), 0u);
  EXPECT_EQ(got[b2].total_replicas(), 4u);
  EXPECT_EQ(got[b2].first_replica(), 3u);
  EXPECT_EQ(got[b2].node_first_replica(), 2u);
  // Every shard heard of the generation before the workers did.
  for (const char* address : {"ps0:1", "ps1:1"}) {
    ASSERT_EQ(shards_[address].begun.size(), 1u);
    EXPECT_EQ(shards_[address].begun[0].generation(), 1u);
    EXPECT_EQ(shards_[address].begun[0].num_nodes(), 2u);
    EXPECT_EQ(shards_[address].begun[0].resume_step(), 0u);
  }
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS);
  BeatAll({a1, a2, b1, b2}, 1, v1::WORKER_RENDEZVOUS);
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS);
  BeatAll({a1, a2, b1, b2}, 1);
  EXPECT_EQ(GetJob().state(), v1::RUNNING);
  EXPECT_EQ(Beat(a1, 1).action(), v1::ACTION_CONTINUE);
}

// CUT_AUTO (the default) is chosen when the first generation forms, from where its
// replicas run, and written into the job: every later generation and GetJob see it.
TEST_F(CoordinatorTest, AnAutomaticCutIsTheLayerCutForSyncOnGpusChosenOnce) {
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));  // devices AUTO: GPUs where a worker has them.
  EXPECT_EQ(job.spec().partition_cut(), v1::CUT_AUTO);
  const std::string a = MustRegister("a", {Gpu(0, "a")});
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS) << reply.message();
  ASSERT_EQ(reply.assignment().devices(0).kind(), v1::GPU);
  EXPECT_EQ(reply.assignment().job().partition_cut(), v1::CUT_LAYERS);
  EXPECT_EQ(GetJob().spec().partition_cut(), v1::CUT_LAYERS);
  EXPECT_THAT(Events(), HasSubstr("partition_cut CUT_AUTO chose CUT_LAYERS (SYNC with every "
                                  "replica on a GPU)"));
  // The GPU worker goes silent and a CPU worker takes over: the job keeps its cut.
  clock_.Advance(absl::Seconds(11));
  coordinator_->Tick();
  const std::string b = MustRegister("b");
  clock_.Advance(absl::Seconds(2));
  coordinator_->Tick();
  const v1::HeartbeatResponse again = Beat(b, 0, v1::WORKER_IDLE);
  ASSERT_EQ(again.action(), v1::ACTION_RENDEZVOUS)
      << coordinator_->GetClusterStatus().waiting_reason();
  EXPECT_EQ(again.assignment().generation(), 2u);
  EXPECT_EQ(again.assignment().devices(0).kind(), v1::CPU);
  EXPECT_EQ(again.assignment().job().partition_cut(), v1::CUT_LAYERS);
  EXPECT_EQ(GetJob().job_id(), job.job_id());
}

TEST_F(CoordinatorTest, AnAutomaticCutIsTheEvenCutOnCpusAndOutsideSync) {
  RegisterShards();
  Submit(Spec(1, 1));
  absl::StatusOr<v1::RegisterWorkerResponse> cpu = Register("a", {Cpu()});
  ASSERT_TRUE(cpu.ok() && cpu->has_assignment()) << cpu.status();
  EXPECT_EQ(cpu->assignment().job().partition_cut(), v1::CUT_EVEN);
  EXPECT_THAT(Events(), HasSubstr("partition_cut CUT_AUTO chose CUT_EVEN (not SYNC with every "
                                  "replica on a GPU)"));

  Make();
  RegisterShards();
  v1::JobSpec local_sgd = Spec(1, 1, v1::GPU);
  local_sgd.set_mode(v1::LOCAL_SGD);
  Submit(local_sgd);
  absl::StatusOr<v1::RegisterWorkerResponse> gpu = Register("a", {Gpu(0, "a")});
  ASSERT_TRUE(gpu.ok() && gpu->has_assignment()) << gpu.status();
  EXPECT_EQ(gpu->assignment().job().partition_cut(), v1::CUT_EVEN);

  // A cut asked for is given as it is, and no choice is noted.
  Make();
  RegisterShards();
  v1::JobSpec layers = Spec(1, 1);
  layers.set_partition_cut(v1::CUT_LAYERS);
  Submit(layers);
  absl::StatusOr<v1::RegisterWorkerResponse> asked = Register("a", {Cpu()});
  ASSERT_TRUE(asked.ok() && asked->has_assignment()) << asked.status();
  EXPECT_EQ(asked->assignment().job().partition_cut(), v1::CUT_LAYERS);
  EXPECT_THAT(Events(), Not(HasSubstr("partition_cut")));
}

TEST_F(CoordinatorTest, RegistrationAnswerCarriesTheAssignmentWhenItFormsTheGeneration) {
  RegisterShards();
  Submit(Spec(1, 1));
  absl::StatusOr<v1::RegisterWorkerResponse> reply = Register("a", {Cpu()});
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_TRUE(reply->has_assignment());
  EXPECT_EQ(reply->assignment().generation(), 1u);
  EXPECT_EQ(reply->assignment().devices(0).kind(), v1::CPU);
  EXPECT_EQ(reply->heartbeat_interval_ms(), 1000u);
}

TEST_F(CoordinatorTest, TooFewGpusOnANodeIsAClearErrorAtRegistration) {
  RegisterShards();
  Submit(Spec(1, 1, v1::GPU));
  MustRegister("a", {Gpu(0, "a"), Gpu(1, "a")});
  MustRegister("a", {Gpu(0, "a"), Gpu(1, "a")});
  absl::StatusOr<v1::RegisterWorkerResponse> third = Register("a", {Gpu(0, "a"), Gpu(1, "a")});
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              AllOf(HasSubstr("node a has too few free GPUs"), HasSubstr("is used by worker w1")));
}

TEST_F(CoordinatorTest, ExplicitGpuRequestedTwiceOnANodeIsRefused) {
  v1::RegisterWorkerRequest request;
  request.set_node_name("a");
  *request.add_devices() = Gpu(0, "a");
  request.add_requested_gpus(0);
  request.set_grpc_port(1);
  v1::RegisterWorkerResponse reply;
  Reply first;
  coordinator_->HandleRegisterWorker(request, &reply, Done(first));
  ASSERT_TRUE(first.status.ok());
  request.set_grpc_port(2);
  Reply second;
  coordinator_->HandleRegisterWorker(request, &reply, Done(second));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status.message(), HasSubstr("GPU 0 (GPU-a-0) is already requested"));
  request.clear_node_name();
  Reply invalid;
  coordinator_->HandleRegisterWorker(request, &reply, Done(invalid));
  EXPECT_EQ(invalid.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, SettleWindowWaitsForUpToNodesMax) {
  RegisterShards();
  Submit(Spec(1, 3));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("settling: 1 of nodes_max=3"));
  clock_.Advance(absl::Seconds(1));
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  clock_.Advance(absl::Seconds(1));
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(b, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(reply.assignment().num_nodes(), 2u);
}

TEST_F(CoordinatorTest, WaitsForPsShardsAndSaysSo) {
  RegisterShards(1);
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  EXPECT_EQ(reply.action(), v1::ACTION_WAIT);
  EXPECT_THAT(reply.message(), HasSubstr("waiting for PS shards: 1 of 2 registered"));
  RegisterShards(2);
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_RENDEZVOUS);
}

TEST_F(CoordinatorTest, SilentWorkerEndsGenerationSurvivorsGetNewRanksAndReturningWorkerJoins) {
  RegisterShards();
  Submit(Spec(1, 3));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  const std::string c = MustRegister("c");
  coordinator_->Tick();
  auto replies = BeatAll({a, b, c}, 0, v1::WORKER_IDLE);
  ASSERT_EQ(replies[b].action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(replies[b].assignment().global_rank(), 1u);
  EXPECT_EQ(replies[c].assignment().global_rank(), 2u);
  const std::string old_rendezvous = replies[a].assignment().rendezvous_id();
  shards_.Install("ps0:1", GetJob().job_id(), 1);
  shards_.Install("ps1:1", GetJob().job_id(), 1);
  BeatAll({a, b, c}, 1, v1::WORKER_TRAINING, 0);
  ASSERT_EQ(GetJob().state(), v1::RUNNING);

  // The shards complete 7 steps; shard 1 is one step ahead (SYNC keeps one back).
  shards_["ps0:1"].step = 7;
  shards_["ps1:1"].step = 8;
  // b goes silent: a and c keep beating.
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    BeatAll({a, c}, 1, v1::WORKER_TRAINING, 7);
  }
  coordinator_->Tick();  // Expires b and ends generation 1.
  EXPECT_FALSE(coordinator_->rendezvous().IsOpen(old_rendezvous));
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(), HasSubstr("settling"));
  clock_.Advance(absl::Seconds(2));  // The settle window gives b a chance to return.
  BeatAll({a, c}, 1, v1::WORKER_TRAINING, 7);
  coordinator_->Tick();  // Forms generation 2 without b.
  const std::string events = Events();
  EXPECT_THAT(events, HasSubstr("RUNNING->RENDEZVOUS: generation 1 ended: worker " + b +
                                " (node b) missed heartbeats"));
  EXPECT_THAT(events, HasSubstr("generation 2 formed: 2 node(s) [a, c]"));
  EXPECT_THAT(events, HasSubstr("resuming at step 7"));
  // Fenced first (it holds the job), then begun at the common step.
  ASSERT_EQ(shards_["ps1:1"].begun.size(), 3u);
  EXPECT_TRUE(shards_["ps1:1"].begun[1].fence());
  EXPECT_EQ(shards_["ps1:1"].begun[1].generation(), 2u);
  EXPECT_FALSE(shards_["ps1:1"].begun[2].fence());
  EXPECT_EQ(shards_["ps1:1"].begun[2].generation(), 2u);
  EXPECT_EQ(shards_["ps1:1"].begun[2].num_nodes(), 2u);
  EXPECT_EQ(shards_["ps1:1"].begun[2].resume_step(), 7u);

  replies = BeatAll({a, c}, 1, v1::WORKER_TRAINING, 7);
  ASSERT_EQ(replies[c].action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(replies[c].assignment().generation(), 2u);
  EXPECT_EQ(replies[c].assignment().global_rank(), 1u) << "c moves up to rank 1";
  EXPECT_EQ(replies[c].assignment().node_rank(), 1u);
  EXPECT_EQ(replies[c].assignment().world_size(), 2u);
  EXPECT_EQ(replies[c].assignment().resume_step(), 7u);
  // The silent worker is gone: its next heartbeat must register again.
  Beat(b, 1);
  EXPECT_EQ(last_heartbeat_status_.code(), absl::StatusCode::kNotFound);
  BeatAll({a, c}, 2, v1::WORKER_TRAINING, 7);
  EXPECT_EQ(GetJob().state(), v1::RUNNING);

  // b comes back: it waits for the next boundary, which its arrival causes after the
  // settle window (the generation can grow to nodes_max=3).
  const std::string b_again = MustRegister("b");
  coordinator_->Tick();
  EXPECT_EQ(Beat(b_again, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(Beat(b_again, 0, v1::WORKER_IDLE).message(), HasSubstr("next generation"));
  clock_.Advance(absl::Seconds(2));
  BeatAll({a, c}, 2, v1::WORKER_TRAINING, 7);
  coordinator_->Tick();
  EXPECT_THAT(Events(), HasSubstr("generation 2 ended: worker " + b_again + " (node b) joined"));
  replies = BeatAll({a, c, b_again}, 2, v1::WORKER_TRAINING, 7);
  ASSERT_EQ(replies[b_again].action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(replies[b_again].assignment().generation(), 3u);
  EXPECT_EQ(replies[b_again].assignment().num_nodes(), 3u);
  EXPECT_EQ(replies[b_again].assignment().node_rank(), 2u) << "nodes keep registration order";
}

TEST_F(CoordinatorTest, TooFewSurvivorsMakeTheJobWaitAndSayWhy) {
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  BeatAll({a, b}, 1);
  ASSERT_EQ(GetJob().state(), v1::RUNNING);
  v1::DeregisterRequest leave;
  leave.set_worker_id(b);
  leave.set_reason("drained by operator");
  v1::DeregisterResponse left;
  Reply r;
  coordinator_->HandleDeregister(leave, &left, Done(r));
  ASSERT_TRUE(r.status.ok());
  coordinator_->Tick();
  const v1::Job job = GetJob();
  EXPECT_EQ(job.state(), v1::RENDEZVOUS);
  EXPECT_THAT(job.state_reason(), HasSubstr("left: drained by operator"));
  const v1::HeartbeatResponse reply = Beat(a, 1);
  EXPECT_EQ(reply.action(), v1::ACTION_WAIT);
  EXPECT_THAT(reply.message(), HasSubstr("generation 1 ended"));
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("waiting for nodes: 1 of nodes_min=2"));
  // GetJob alone says why too.
  EXPECT_THAT(GetJob().waiting_reason(), HasSubstr("waiting for nodes: 1 of nodes_min=2"));
  EXPECT_THAT(coordinator_->GetClusterStatus().job().waiting_reason(),
              HasSubstr("waiting for nodes: 1 of nodes_min=2"));
  // Enough nodes again: a new generation, and nothing to wait for.
  const std::string c = MustRegister("c");
  coordinator_->Tick();
  EXPECT_EQ(Beat(c, 0, v1::WORKER_IDLE).action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(GetJob().waiting_reason(), "");
}

TEST_F(CoordinatorTest, FreeTextFromCallersIsClippedBeforeItIsKept) {
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  BeatAll({a, b}, 1);
  ASSERT_EQ(GetJob().state(), v1::RUNNING);
  v1::HeartbeatRequest failed;
  failed.set_worker_id(a);
  failed.set_generation(1);
  failed.set_phase(v1::WORKER_FAILED);
  failed.set_error(std::string(1 << 20, 'e'));
  v1::HeartbeatResponse reply;
  Reply beat;
  coordinator_->HandleHeartbeat(failed, &reply, Done(beat));
  coordinator_->Tick();
  const v1::Job job = GetJob();
  EXPECT_THAT(job.state_reason(), HasSubstr("... (1047552 more bytes)"));
  EXPECT_LT(job.state_reason().size(), 2048u);
  EXPECT_LT(Events().size(), 64u << 10) << "the events keep the clipped text only";
  v1::JobControlRequest pause;
  pause.set_reason(std::string(100000, 'r'));
  v1::Job paused;
  Reply r;
  coordinator_->HandlePauseJob(pause, &paused, Done(r));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(GetJob().state_reason(), HasSubstr("... (98976 more bytes)"));
  EXPECT_LT(Events().size(), 64u << 10);
}

TEST_F(CoordinatorTest, SameErrorFromEveryWorkerFailsTheJob) {
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  const std::string missing = "dataset file /data/train.csv: No such file or directory";
  Beat(a, 1, v1::WORKER_FAILED, 0, missing);
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS) << "one worker's error may be its machine's";
  Beat(b, 1, v1::WORKER_FAILED, 0, missing);
  const v1::Job job = GetJob();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.state_reason(),
              HasSubstr("every worker of generation 1 (2) failed with: " + missing));
  EXPECT_EQ(Beat(a, 1, v1::WORKER_FAILED, 0, missing).action(), v1::ACTION_STOP);
}

TEST_F(CoordinatorTest, GenerationsDyingOfWorkerErrorsWithoutProgressFailTheJob) {
  CoordinatorOptions options = Options();
  options.max_generation_failures = 2;
  Make(options);
  RegisterShards();
  Submit(Spec(1, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  Beat(a, 1, v1::WORKER_FAILED, 0, "CUDA error: out of memory");
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS);
  coordinator_->Tick();
  clock_.Advance(absl::Seconds(2));
  Beat(b, 1);
  coordinator_->Tick();  // Generation 2 with b alone; a is out until it recovers.
  ASSERT_EQ(Beat(b, 1).action(), v1::ACTION_RENDEZVOUS);
  Beat(b, 2, v1::WORKER_FAILED, 0, "Gloo: connection reset");
  const v1::Job job = GetJob();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.state_reason(),
              HasSubstr("2 generations in a row ended by worker errors without completing a step"));
}

TEST_F(CoordinatorTest, WorkerThatLeftItsStepEndsTheGenerationWhileEveryoneLives) {
  CoordinatorOptions options = Options();
  options.max_generation_failures = 2;
  Make(options);
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  BeatAll({a, b}, 1, v1::WORKER_TRAINING, 0);
  ASSERT_EQ(GetJob().state(), v1::RUNNING);
  // Building its groups (no error) is not a failure.
  Beat(a, 1, v1::WORKER_RENDEZVOUS);
  EXPECT_EQ(GetJob().state(), v1::RUNNING);
  EXPECT_EQ(GetJob().generation(), 1u);

  // a gave up its step (a shard refused a push) and waits: nobody died, so without
  // this rule the job would wait forever.
  Beat(a, 1, v1::WORKER_RENDEZVOUS, 0, "PS shard 1: stream ended: UNAVAILABLE");
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS);
  EXPECT_THAT(Events(), HasSubstr("generation 1 ended: worker " + a +
                                  " (node a) left its step: PS shard 1: stream ended"));
  EXPECT_EQ(Beat(b, 1).action(), v1::ACTION_WAIT) << "b's generation ended too";
  clock_.Advance(absl::Seconds(2));
  BeatAll({a, b}, 1, v1::WORKER_RENDEZVOUS);
  coordinator_->Tick();
  const auto replies = BeatAll({a, b}, 1, v1::WORKER_RENDEZVOUS);
  ASSERT_EQ(replies.at(a).action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(replies.at(a).assignment().generation(), 2u);

  // A cause that persists fails the job (rule B) instead of re-forming forever.
  Beat(b, 2, v1::WORKER_RENDEZVOUS, 0, "the PS shards stand at step 9 but ...");
  const v1::Job job = GetJob();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.state_reason(),
              HasSubstr("2 generations in a row ended by worker errors without completing a step"));
}

TEST_F(CoordinatorTest, RecoveredWorkerIsEligibleAgain) {
  RegisterShards();
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("a");
  Submit(Spec(1, 1));
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  Beat(a, 1, v1::WORKER_FAILED, 0, "bad GPU");
  EXPECT_EQ(GetJob().state(), v1::RENDEZVOUS) << "b has not failed: not the job's fault";
  coordinator_->Tick();
  EXPECT_EQ(Beat(b, 1).assignment().world_size(), 1u) << "a sits out while failed";
  const v1::HeartbeatResponse still_failed = Beat(a, 1, v1::WORKER_FAILED, 0, "bad GPU");
  EXPECT_EQ(still_failed.action(), v1::ACTION_WAIT);
  EXPECT_THAT(still_failed.message(), HasSubstr("generation 1 ended"));
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  coordinator_->Tick();  // a would enlarge the generation: the settle window starts.
  clock_.Advance(absl::Seconds(2));
  BeatAll({a, b}, 2);
  coordinator_->Tick();  // Scale-up: generation 3 with both.
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).assignment().world_size(), 2u);
  EXPECT_EQ(Beat(b, 2).assignment().generation(), 3u);
}

TEST_F(CoordinatorTest, SingleWorkerWithAJobErrorFailsTheJob) {
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  Beat(a, 1, v1::WORKER_FAILED, 0, "dataset directory /nope: not found");
  const v1::Job job = GetJob();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.state_reason(),
              HasSubstr("every registered worker (1) failed with: dataset directory /nope"));
}

TEST_F(CoordinatorTest, ProgressCompletionAndResult) {
  RegisterShards();
  const v1::Job submitted = Submit(Spec(2, 2));
  EXPECT_EQ(submitted.total_steps(), 20u) << "synthetic data: steps known at submission";
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  shards_.Install("ps0:1", submitted.job_id(), 1);
  shards_.Install("ps1:1", submitted.job_id(), 1);
  shards_["ps0:1"].bytes_in = 5000;
  coordinator_->PollShards();
  Beat(a, 1, v1::WORKER_TRAINING, 5, "", 2.0f);
  Beat(b, 1, v1::WORKER_TRAINING, 4, "", 1.0f);
  v1::Job job = GetJob();
  EXPECT_EQ(job.step(), 4u) << "the job's step is the slowest worker's";
  ASSERT_EQ(job.progress_size(), 1);
  EXPECT_EQ(job.progress(0).step(), 4u);
  EXPECT_FLOAT_EQ(job.progress(0).loss(), 1.5f);
  EXPECT_DOUBLE_EQ(job.progress(0).samples_per_second(), 200);
  Beat(b, 1, v1::WORKER_TRAINING, 12);
  Beat(a, 1, v1::WORKER_TRAINING, 13);
  job = GetJob();
  EXPECT_EQ(job.step(), 12u);
  EXPECT_EQ(job.epoch(), 1u);
  EXPECT_EQ(job.steps_per_epoch(), 10u);
  Beat(a, 1, v1::WORKER_FINISHED, 20);
  EXPECT_EQ(GetJob().state(), v1::RUNNING);
  Beat(b, 1, v1::WORKER_FINISHED, 20);
  job = GetJob();
  EXPECT_EQ(job.state(), v1::COMPLETED);
  EXPECT_THAT(job.state_reason(), HasSubstr("finished: 20 of 20 steps"));
  EXPECT_EQ(job.result().steps(), 20u);
  EXPECT_EQ(job.result().bytes_pushed(), 2000u)
      << "the job's own traffic: each worker's count in its generation (1000 each), not the "
         "shards' counters since they started (5000)";
  EXPECT_GT(job.result().samples_per_second(), 0);
  EXPECT_TRUE(job.has_finished());
  EXPECT_EQ(Beat(a, 1, v1::WORKER_FINISHED, 20).action(), v1::ACTION_STOP);
  coordinator_->Tick();
  EXPECT_THAT(shards_["ps0:1"].ended, ElementsAre(submitted.job_id()));
  EXPECT_THAT(shards_["ps1:1"].ended, ElementsAre(submitted.job_id()));
}

TEST_F(CoordinatorTest, ProgressHistoryIsBounded) {
  CoordinatorOptions options = Options();
  options.progress_history = 10;
  Make(options);
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  for (uint64_t step = 1; step <= 100; ++step) Beat(a, 1, v1::WORKER_TRAINING, step);
  const v1::Job job = GetJob();
  EXPECT_LE(job.progress_size(), 10);
  EXPECT_EQ(job.progress(0).step(), 1u) << "the curve still starts at the beginning";
  EXPECT_EQ(job.progress(job.progress_size() - 1).step(), 100u);
}

TEST_F(CoordinatorTest, PauseResumeStopWithReasons) {
  RegisterShards();
  Submit(Spec(1, 1));
  EXPECT_EQ(Control("pause").status().code(), absl::StatusCode::kFailedPrecondition)
      << "PENDING cannot be paused";
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  Beat(a, 1);
  ASSERT_TRUE(Control("pause", "maintenance window").ok());
  EXPECT_EQ(Beat(a, 1).action(), v1::ACTION_PAUSE);
  EXPECT_EQ(Control("pause").status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<v1::Job> resumed = Control("resume", "done");
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->state(), v1::RUNNING);
  EXPECT_EQ(Beat(a, 1).action(), v1::ACTION_CONTINUE);
  EXPECT_EQ(Control("resume").status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<v1::Job> stopped = Control("stop", "wrong learning rate");
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), v1::STOPPED);
  EXPECT_EQ(Beat(a, 1).action(), v1::ACTION_STOP);
  EXPECT_THAT(Beat(a, 1).message(), HasSubstr("wrong learning rate"));
  EXPECT_EQ(Control("stop").status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string events = Events();
  EXPECT_THAT(events, HasSubstr("RUNNING->PAUSED: paused: maintenance window"));
  EXPECT_THAT(events, HasSubstr("PAUSED->RUNNING: resumed: done"));
  EXPECT_THAT(events, HasSubstr("RUNNING->STOPPED: stopped: wrong learning rate"));
  // The next job may start now; idle workers join it.
  Submit(Spec(1, 1));
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 1).action(), v1::ACTION_RENDEZVOUS);
}

TEST_F(CoordinatorTest, PauseNamesTheBoundaryEveryWorkerHoldsAtOnceAllReportedWhereTheyCan) {
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  BeatAll({a, b}, 1, v1::WORKER_TRAINING, 5);
  auto pausing = [&](const std::string& worker, uint64_t holding,
                     v1::WorkerPhase phase = v1::WORKER_PAUSING) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_generation(1);
    request.set_phase(phase);
    request.set_step(5);
    request.set_holding_at_step(holding);
    v1::HeartbeatResponse reply;
    Reply r;
    coordinator_->HandleHeartbeat(request, &reply, Done(r));
    EXPECT_TRUE(r.called && r.status.ok()) << r.status;
    return reply;
  };
  ASSERT_TRUE(Control("pause").ok());
  // a holds before step 6; b is still inside step 6 (it can hold before 7 at the
  // earliest). Until both said so nobody is told where to pause.
  v1::HeartbeatResponse reply = pausing(a, 6);
  EXPECT_EQ(reply.action(), v1::ACTION_PAUSE);
  EXPECT_FALSE(reply.has_pause_at_step());
  EXPECT_FALSE(Beat(b, 1, v1::WORKER_TRAINING, 5).has_pause_at_step());
  reply = pausing(b, 7);
  ASSERT_TRUE(reply.has_pause_at_step());
  EXPECT_EQ(reply.pause_at_step(), 7u) << "the highest boundary: a runs on to it";
  // The boundary stands while paused, whatever the workers report next.
  EXPECT_EQ(pausing(a, 7, v1::WORKER_PAUSED).pause_at_step(), 7u);
  EXPECT_EQ(pausing(b, 7, v1::WORKER_PAUSED).pause_at_step(), 7u);
  EXPECT_EQ(GetJob().state(), v1::PAUSED);

  // Resumed and paused again: a new boundary, from new reports.
  ASSERT_TRUE(Control("resume").ok());
  EXPECT_EQ(Beat(a, 1, v1::WORKER_TRAINING, 9).action(), v1::ACTION_CONTINUE);
  ASSERT_TRUE(Control("pause").ok());
  EXPECT_FALSE(pausing(a, 12).has_pause_at_step());
  EXPECT_EQ(pausing(b, 11).pause_at_step(), 12u);
}

TEST_F(CoordinatorTest, AsyncWorkersPauseWhereTheyAreWithoutABoundary) {
  RegisterShards();
  v1::JobSpec spec = Spec(1, 1);
  spec.set_mode(v1::ASYNC);
  Submit(spec);
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  Beat(a, 1, v1::WORKER_TRAINING, 3);
  ASSERT_TRUE(Control("pause").ok());
  const v1::HeartbeatResponse reply = Beat(a, 1, v1::WORKER_PAUSED, 3);
  EXPECT_EQ(reply.action(), v1::ACTION_PAUSE);
  EXPECT_FALSE(reply.has_pause_at_step());
}

TEST_F(CoordinatorTest, PausedJobDoesNotFormAndResumeReforms) {
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  Beat(a, 1);
  ASSERT_TRUE(Control("pause").ok());
  // A shard restart ends the generation while paused: nothing forms until resumed.
  RegisterShards(1);
  coordinator_->Tick();
  EXPECT_EQ(GetJob().state(), v1::PAUSED);
  EXPECT_EQ(Beat(a, 1).action(), v1::ACTION_WAIT);
  absl::StatusOr<v1::Job> resumed = Control("resume");
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->state(), v1::RENDEZVOUS);
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 1).assignment().generation(), 2u);
}

TEST_F(CoordinatorTest, SubmitValidatesFieldByFieldAndRunsOneJobAtATime) {
  v1::SubmitJobRequest request;
  request.mutable_spec()->mutable_model()->set_name("resnet");
  v1::Job job;
  Reply bad_model;
  coordinator_->HandleSubmitJob(request, &job, Done(bad_model));
  EXPECT_EQ(bad_model.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_model.status.message(), HasSubstr("spec.model.name"));
  request.mutable_spec()->mutable_model()->set_name("mlp");
  request.mutable_spec()->set_nodes_min(3);
  request.mutable_spec()->set_nodes_max(2);
  Reply bad_nodes;
  coordinator_->HandleSubmitJob(request, &job, Done(bad_nodes));
  EXPECT_THAT(bad_nodes.status.message(), HasSubstr("spec.nodes_max"));
  Submit(Spec(1, 1));
  Reply second;
  request.mutable_spec()->set_nodes_max(3);
  coordinator_->HandleSubmitJob(request, &job, Done(second));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status.message(), HasSubstr("one active job at a time"));
}

TEST_F(CoordinatorTest, EmptyShardsGetTheJobAtTheGenerationFromTheWorkers) {
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  // Told first (and refused, holding no job); nothing to catch up on later.
  EXPECT_EQ(shards_["ps0:1"].begun.size(), 1u);
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_RENDEZVOUS);
  EXPECT_THAT(Events(), HasSubstr("shard(s) 0, 1 get the job at this generation from the "
                                  "workers' InitPartitions"));
  shards_.Install("ps0:1", job.job_id(), 1);
  shards_.Install("ps1:1", job.job_id(), 1);
  coordinator_->PollShards();
  EXPECT_EQ(shards_["ps0:1"].begun.size(), 1u) << "no BeginGeneration is repeated";
  EXPECT_EQ(coordinator_->GetClusterStatus().shards(0).error(), "");
}

TEST_F(CoordinatorTest, UnreachableShardDelaysTheGenerationWithAReason) {
  RegisterShards();
  shards_["ps1:1"].reachable = false;
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  EXPECT_EQ(reply.action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("PS shard 1 at ps1:1: connection refused"));
  coordinator_->PollShards();
  const v1::ClusterStatus status = coordinator_->GetClusterStatus();
  ASSERT_EQ(status.shards_size(), 2);
  EXPECT_TRUE(status.shards(0).reachable());
  EXPECT_FALSE(status.shards(1).reachable());
  EXPECT_THAT(status.shards(1).error(), HasSubstr("connection refused"));
  shards_["ps1:1"].reachable = true;
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT) << "retry waits";
  clock_.Advance(absl::Seconds(1));
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_RENDEZVOUS);
}

TEST_F(CoordinatorTest, AFormationThatKeepsFailingFailsTheJobAfterTheTimeout) {
  CoordinatorOptions options = Options();
  options.formation_timeout = absl::Seconds(30);
  Make(options);
  RegisterShards();
  shards_["ps1:1"].reachable = false;
  const v1::Job job = Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  for (int second = 0; second < 29; ++second) {
    coordinator_->Tick();
    Beat(a, 0, v1::WORKER_IDLE);
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(coordinator_->GetClusterStatus().job().state(), v1::PENDING)
      << "still within the timeout";
  for (int second = 0; second < 3; ++second) {
    clock_.Advance(absl::Seconds(1));
    coordinator_->Tick();
  }
  const v1::Job failed = coordinator_->GetClusterStatus().job();
  EXPECT_EQ(failed.job_id(), job.job_id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.state_reason(),
              AllOf(HasSubstr("no generation could form for 3"),
                    HasSubstr("--formation_timeout=30s"), HasSubstr("connection refused")));
}

TEST_F(CoordinatorTest, ShardsThatMoveOnWhileAGenerationFormsAreFencedFirst) {
  // The members of the ended generation keep pushing while the coordinator forms the
  // next one: every call finds both shards a step further. Without a fence the shard
  // told last has moved two steps past the resume step and cannot roll back.
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));
  for (const char* shard : {"ps0:1", "ps1:1"}) {
    shards_.Install(shard, job.job_id(), /*generation=*/3);
    shards_[shard].step = 10;
    shards_[shard].racing_steps = 1;
  }
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS)
      << coordinator_->GetClusterStatus().waiting_reason();
  for (const char* shard : {"ps0:1", "ps1:1"}) {
    const std::vector<v1::BeginGenerationRequest>& begun = shards_[shard].begun;
    ASSERT_EQ(begun.size(), 2u) << shard;
    EXPECT_TRUE(begun[0].fence()) << shard << ": fenced first";
    EXPECT_EQ(begun[0].generation(), 4u);
    EXPECT_FALSE(begun[1].fence());
    EXPECT_EQ(begun[1].generation(), 4u) << "the fenced generation, begun for real";
    EXPECT_EQ(begun[1].resume_step(), reply.assignment().resume_step());
    EXPECT_EQ(shards_[shard].step, reply.assignment().resume_step()) << shard;
  }
  EXPECT_EQ(reply.assignment().generation(), 4u);
  EXPECT_GT(reply.assignment().resume_step(), 10u) << "the steps done meanwhile count";
}

TEST_F(CoordinatorTest, ShardThatLostItsStateStopsTheResume) {
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));
  shards_.Install("ps0:1", job.job_id());
  shards_["ps0:1"].step = 30;
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("PS shard(s) 1 hold no state of job " + job.job_id() +
                        " while shard(s) 0 stand at step 30"));
}

TEST_F(CoordinatorTest, AResumingJobStartsFromTheNewestStepEveryShardHolds) {
  RegisterShards();
  shards_["ps0:1"].checkpoints["job-1-old"] = {100, 200, 300};
  shards_["ps1:1"].checkpoints["job-1-old"] = {100, 200};  // 300 not written here.
  v1::JobSpec spec = Spec(1, 1);
  spec.set_resume_from("job-1-old");
  const v1::Job job = Submit(spec);
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS)
      << coordinator_->GetClusterStatus().waiting_reason();
  EXPECT_EQ(reply.assignment().resume_step(), 200u);
  for (const char* shard : {"ps0:1", "ps1:1"}) {
    ASSERT_EQ(shards_[shard].restored.size(), 1u) << shard;
    EXPECT_EQ(shards_[shard].restored[0].job_id(), job.job_id());
    EXPECT_EQ(shards_[shard].restored[0].from_job_id(), "job-1-old");
    EXPECT_EQ(shards_[shard].restored[0].step(), 200u);
  }
  EXPECT_THAT(Events(), HasSubstr("resumes job job-1-old from its checkpoint of step 200"));
}

// A resumed CUT_AUTO job takes the cut its state was planned with, wherever it runs now;
// a job asking for another cut than its shards hold does not form.
TEST_F(CoordinatorTest, AResumedJobKeepsTheCutOfTheStateItResumes) {
  RegisterShards();
  for (const char* shard : {"ps0:1", "ps1:1"}) {
    shards_[shard].checkpoints["job-1-old"] = {100};
    shards_[shard].cut = v1::CUT_EVEN;  // Planned on CPU workers.
  }
  v1::JobSpec spec = Spec(1, 1, v1::GPU);
  spec.set_resume_from("job-1-old");
  Submit(spec);
  const std::string a = MustRegister("a", {Gpu(0, "a")});
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS)
      << coordinator_->GetClusterStatus().waiting_reason();
  EXPECT_EQ(reply.assignment().resume_step(), 100u);
  EXPECT_EQ(reply.assignment().job().partition_cut(), v1::CUT_EVEN);
  EXPECT_THAT(Events(), HasSubstr("partition_cut CUT_AUTO chose CUT_EVEN (the cut of the state "
                                  "the PS shards hold)"));
}

TEST_F(CoordinatorTest, ShardsHoldingTheJobUnderAnotherCutStopTheFormation) {
  RegisterShards();
  v1::JobSpec spec = Spec(1, 1);
  spec.set_partition_cut(v1::CUT_LAYERS);
  const v1::Job job = Submit(spec);
  for (const char* shard : {"ps0:1", "ps1:1"}) {
    shards_.Install(shard, job.job_id(), 3);
    shards_[shard].step = 30;
    shards_[shard].cut = v1::CUT_EVEN;
  }
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("the PS shards hold job " + job.job_id() +
                        " planned with partition_cut CUT_EVEN, its spec says CUT_LAYERS"));
  // Shards that disagree among themselves are no better.
  shards_["ps1:1"].cut = v1::CUT_LAYERS;
  clock_.Advance(absl::Seconds(1));
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              HasSubstr("under different partition cuts (CUT_EVEN and, on shard 1, CUT_LAYERS)"));
}

// A restore that failed on one shard after another installed its checkpoint is
// retried at the next formation: the installed shard lists its own step and keeps it.
TEST_F(CoordinatorTest, ARestoreThatFailedPartWayIsRetried) {
  RegisterShards();
  shards_["ps0:1"].checkpoints["job-1-old"] = {100, 200};
  shards_["ps1:1"].checkpoints["job-1-old"] = {100, 200};
  shards_["ps1:1"].failing_restores = 1;
  v1::JobSpec spec = Spec(1, 1);
  spec.set_resume_from("job-1-old");
  const v1::Job job = Submit(spec);
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(), HasSubstr("deadline exceeded"));
  EXPECT_EQ(shards_["ps0:1"].job_id, job.job_id()) << "shard 0 installed its checkpoint";
  EXPECT_TRUE(shards_["ps1:1"].job_id.empty());
  clock_.Advance(absl::Seconds(1));
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS)
      << coordinator_->GetClusterStatus().waiting_reason();
  EXPECT_EQ(reply.assignment().resume_step(), 200u);
  EXPECT_EQ(shards_["ps0:1"].restored.size(), 1u) << "installed once";
  ASSERT_EQ(shards_["ps1:1"].restored.size(), 1u);
  EXPECT_EQ(shards_["ps1:1"].restored[0].step(), 200u);
  EXPECT_EQ(shards_["ps1:1"].restored[0].num_shards(), 2u);
}

TEST_F(CoordinatorTest, AResumeWithoutACommonCheckpointSaysWhatEachShardHolds) {
  RegisterShards();
  shards_["ps0:1"].checkpoints["job-1-old"] = {300};
  v1::JobSpec spec = Spec(1, 1);
  spec.set_resume_from("job-1-old");
  Submit(spec);
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_WAIT);
  EXPECT_THAT(coordinator_->GetClusterStatus().waiting_reason(),
              AllOf(HasSubstr("no step has an intact checkpoint of it on every PS shard"),
                    HasSubstr("shard 0: 300; shard 1: none")));
}

// A GPU job on CPU-only workers can never be placed: the job says why, and with
// pending_timeout_seconds it fails after that long instead of waiting for ever.
TEST_F(CoordinatorTest, AJobThatCannotBePlacedSaysWhyAndFailsWhenAsked) {
  RegisterShards();
  v1::JobSpec spec = Spec(1, 1, v1::GPU);
  spec.set_pending_timeout_seconds(30);
  const v1::Job job = Submit(spec);
  const std::string a = MustRegister("a");  // CPU only.
  for (int second = 0; second < 29; ++second) {
    coordinator_->Tick();
    Beat(a, 0, v1::WORKER_IDLE);
    clock_.Advance(absl::Seconds(1));
  }
  const v1::Job waiting = coordinator_->GetClusterStatus().job();
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_THAT(waiting.waiting_reason(),
              HasSubstr("the job runs on GPUs (devices=GPU) but worker " + a));
  clock_.Advance(absl::Seconds(2));
  coordinator_->Tick();
  const v1::Job failed = coordinator_->GetClusterStatus().job();
  EXPECT_EQ(failed.job_id(), job.job_id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.state_reason(),
              AllOf(HasSubstr("no generation formed within 30"),
                    HasSubstr("pending_timeout_seconds"), HasSubstr("reported none")));
}

TEST_F(CoordinatorTest, ShardHoldingAnOldJobIsFreed) {
  RegisterShards();
  shards_.Install("ps1:1", "job-from-before");
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  EXPECT_THAT(shards_["ps1:1"].ended, ElementsAre("job-from-before"));
  EXPECT_EQ(Beat(a, 0, v1::WORKER_IDLE).action(), v1::ACTION_RENDEZVOUS);
}

TEST_F(CoordinatorTest, ShardRegistrationRules) {
  v1::RegisterParameterServerRequest request;
  v1::RegisterParameterServerResponse reply;
  Reply empty;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(empty));
  EXPECT_THAT(empty.status.message(), HasSubstr("address"));
  request.set_address("ps9:1");
  request.set_shard_index(5);
  Reply out_of_range;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(out_of_range));
  EXPECT_THAT(out_of_range.status.message(), HasSubstr("--ps_shards=2"));
  request.set_shard_index(-1);
  Reply picked;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(picked));
  ASSERT_TRUE(picked.status.ok());
  EXPECT_EQ(reply.shard_index(), 0u);
  EXPECT_EQ(reply.expected_shards(), 2u);
  Reply again;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(again));
  EXPECT_EQ(reply.shard_index(), 0u) << "the same address keeps its index";
  request.set_address("other:1");
  request.set_shard_index(0);
  Reply taken;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(taken));
  EXPECT_EQ(taken.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(taken.status.message(), HasSubstr("taken by the live shard at ps9:1"));
  // Once the holder is seen unreachable, a replacement may take its index.
  shards_["ps9:1"].reachable = false;
  coordinator_->PollShards();
  Reply replaced;
  coordinator_->HandleRegisterParameterServer(request, &reply, Done(replaced));
  EXPECT_TRUE(replaced.status.ok()) << replaced.status;
}

TEST_F(CoordinatorTest, GenerationEndAbortsRendezvousWaiters) {
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const v1::Assignment assignment = Beat(a, 0, v1::WORKER_IDLE).assignment();
  v1::WaitRendezvousRequest wait;
  wait.set_rendezvous_id(assignment.rendezvous_id());
  wait.add_keys("nccl_id");
  wait.set_timeout_ms(60000);
  v1::WaitRendezvousResponse values;
  Reply r;
  EXPECT_NE(coordinator_->HandleWaitRendezvous(wait, &values, Done(r)), 0u);
  EXPECT_FALSE(r.called);
  Beat(a, 1, v1::WORKER_FAILED, 0, "segfault");
  ASSERT_TRUE(r.called);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(r.status.message(), HasSubstr("segfault"));
}

TEST_F(CoordinatorTest, RendezvousThroughTheHandler) {
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  const std::string id = Beat(a, 0, v1::WORKER_IDLE).assignment().rendezvous_id();
  v1::WaitRendezvousRequest wait;
  wait.set_rendezvous_id(id);
  wait.add_keys("k");
  wait.set_timeout_ms(1000);
  v1::WaitRendezvousResponse values;
  Reply waited;
  coordinator_->HandleWaitRendezvous(wait, &values, Done(waited));
  v1::PublishRendezvousRequest publish;
  publish.set_rendezvous_id(id);
  publish.set_key("k");
  publish.set_value("v");
  v1::PublishRendezvousResponse published;
  Reply r;
  coordinator_->HandlePublishRendezvous(publish, &published, Done(r));
  ASSERT_TRUE(r.status.ok());
  ASSERT_TRUE(waited.called);
  EXPECT_THAT(values.values(), ElementsAre("v"));
  wait.clear_keys();
  wait.add_keys("missing");
  Reply timed_out;
  v1::WaitRendezvousResponse none;
  coordinator_->HandleWaitRendezvous(wait, &none, Done(timed_out));
  clock_.Advance(absl::Seconds(1));
  coordinator_->ExpireRendezvousDeadlines();
  EXPECT_EQ(timed_out.status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorTest, StragglerMarkedInStatus) {
  RegisterShards();
  Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  v1::HeartbeatRequest slow;
  slow.set_worker_id(b);
  slow.set_generation(1);
  slow.set_phase(v1::WORKER_TRAINING);
  slow.set_step_seconds(0.5);
  v1::HeartbeatResponse reply;
  Reply r;
  coordinator_->HandleHeartbeat(slow, &reply, Done(r));
  Beat(a, 1);  // 0.1 s per step.
  const v1::ClusterStatus status = coordinator_->GetClusterStatus();
  ASSERT_EQ(status.nodes_size(), 2);
  EXPECT_FALSE(status.nodes(0).workers(0).straggler());
  EXPECT_TRUE(status.nodes(1).workers(0).straggler());
  EXPECT_EQ(status.generation(), 1u);
  EXPECT_EQ(status.expected_shards(), 2u);
}

TEST_F(CoordinatorTest, ARegistrationFromAKnownEndpointReplacesOnlyASilentWorker) {
  RegisterShards();
  Submit(Spec(1, 1, v1::GPU));
  absl::StatusOr<v1::RegisterWorkerResponse> first = Register("a", {Gpu(0, "a")}, 7000);
  ASSERT_TRUE(first.ok());
  // Someone registers from worker a's endpoint (node, host and port are public): a new
  // worker, no "GPU in use" error, and the live worker keeps its record.
  absl::StatusOr<v1::RegisterWorkerResponse> impostor = Register("a", {Gpu(0, "a")}, 7000);
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  EXPECT_NE(first->worker_id(), impostor->worker_id());
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat(first->worker_id(), 0);
    EXPECT_TRUE(last_heartbeat_status_.ok()) << last_heartbeat_status_;
    coordinator_->Tick();
  }
  // Worker a restarts: its new process registers from the endpoint and the old one is
  // silent from then on. Three heartbeat intervals later the old record is gone.
  absl::StatusOr<v1::RegisterWorkerResponse> restarted = Register("a", {Gpu(0, "a")}, 7000);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  clock_.Advance(absl::Seconds(2));
  coordinator_->Tick();
  Beat(restarted->worker_id(), 0);
  EXPECT_TRUE(last_heartbeat_status_.ok()) << last_heartbeat_status_;
  clock_.Advance(absl::Seconds(2));
  coordinator_->Tick();
  Beat(first->worker_id(), 0);
  EXPECT_EQ(last_heartbeat_status_.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(last_heartbeat_status_.message(), HasSubstr(first->worker_id()));
  Beat(restarted->worker_id(), 0);
  EXPECT_TRUE(last_heartbeat_status_.ok()) << last_heartbeat_status_;
}

TEST_F(CoordinatorTest, AnExplicitGpuOfASupersededWorkerIsRetriedNotRefused) {
  RegisterShards();
  v1::RegisterWorkerRequest request;
  request.set_node_name("a");
  request.set_host("host-a");
  request.set_grpc_port(7000);
  *request.add_devices() = Gpu(0, "a");
  request.add_requested_gpus(0);
  auto register_once = [&]() -> absl::Status {
    v1::RegisterWorkerResponse reply;
    Reply r;
    coordinator_->HandleRegisterWorker(request, &reply, Done(r));
    if (!r.called) coordinator_->Tick();
    return r.status;
  };
  ASSERT_TRUE(register_once().ok());
  // The restarted process asks for the same GPU: UNAVAILABLE (the worker retries),
  // not RESOURCE_EXHAUSTED, and once the old record is gone it gets it.
  const absl::Status busy = register_once();
  EXPECT_EQ(busy.code(), absl::StatusCode::kUnavailable) << busy;
  EXPECT_THAT(busy.message(), HasSubstr("registered before from this endpoint"));
  clock_.Advance(absl::Seconds(4));
  coordinator_->Tick();
  EXPECT_TRUE(register_once().ok());
}

// A heartbeat carrying its worker's step reports (one per step in [first, last]) and,
// for `evaluated` steps, an evaluation.
v1::HeartbeatRequest StepsBeat(const std::string& worker, uint64_t generation,
                               v1::WorkerPhase phase, uint64_t first, uint64_t last,
                               double step_seconds, uint64_t bytes_pushed,
                               std::vector<uint64_t> evaluated = {}) {
  v1::HeartbeatRequest request;
  request.set_worker_id(worker);
  request.set_generation(generation);
  request.set_phase(phase);
  request.set_step(last);
  request.set_loss(1.0f);
  request.set_test_accuracy(-1);
  request.set_steps_per_epoch(10);
  request.set_total_steps(20);
  request.set_bytes_pushed(bytes_pushed);
  request.set_bytes_pulled(2 * bytes_pushed);
  for (uint64_t step = first; step <= last; ++step) {
    v1::StepReport* report = request.add_steps();
    report->set_step(step);
    report->set_loss(2.0f / step);
    report->set_samples(50);
    report->set_step_seconds(step_seconds);
    report->set_push_wait_seconds(0.01);
  }
  for (uint64_t step : evaluated) {
    v1::EvaluationReport* evaluation = request.add_evaluations();
    evaluation->set_step(step);
    evaluation->set_test_accuracy(0.5f + step / 100.0f);
  }
  return request;
}

TEST_F(CoordinatorTest, HistoryHoldsAPointPerStepEveryEvaluationAndEachWorkersTimeline) {
  RegisterShards();
  const v1::Job submitted = Submit(Spec(2, 2));
  const std::string a = MustRegister("a");
  const std::string b = MustRegister("b");
  coordinator_->Tick();
  BeatAll({a, b}, 0, v1::WORKER_IDLE);
  auto beat = [&](const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse reply;
    Reply r;
    coordinator_->HandleHeartbeat(request, &reply, Done(r));
    EXPECT_TRUE(r.status.ok()) << r.status;
  };
  // Heartbeats carry several steps each; b is the slow one.
  beat(StepsBeat(a, 1, v1::WORKER_TRAINING, 1, 7, 0.1, 700, {5}));
  beat(StepsBeat(b, 1, v1::WORKER_TRAINING, 1, 4, 0.3, 400));
  v1::JobHistory history;
  Reply got;
  coordinator_->HandleGetJobHistory(v1::GetJobHistoryRequest(), &history, Done(got));
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(history.job_id(), submitted.job_id());
  EXPECT_EQ(history.steps_size(), 4) << "steps every worker completed";
  beat(StepsBeat(a, 1, v1::WORKER_FINISHED, 8, 20, 0.1, 2000, {10, 20}));
  beat(StepsBeat(b, 1, v1::WORKER_FINISHED, 5, 20, 0.3, 2000));
  const v1::Job job = GetJob();
  ASSERT_EQ(job.state(), v1::COMPLETED);

  history.Clear();
  Reply again;
  v1::GetJobHistoryRequest request;
  request.set_job_id(submitted.job_id());
  coordinator_->HandleGetJobHistory(request, &history, Done(again));
  ASSERT_TRUE(again.status.ok()) << again.status;
  ASSERT_EQ(history.steps_size(), 20);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(history.steps(i).step(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(history.steps(i).workers(), 2u);
    EXPECT_FLOAT_EQ(history.steps(i).loss(), 2.0f / (i + 1));
    EXPECT_EQ(history.steps(i).slowest_worker(), b);
  }
  EXPECT_DOUBLE_EQ(history.steps(0).samples_per_second(), 50 / 0.1 + 50 / 0.3);
  ASSERT_EQ(history.evaluations_size(), 3);
  EXPECT_EQ(history.evaluations(2).step(), 20u);
  EXPECT_FLOAT_EQ(history.evaluations(2).test_accuracy(), 0.7f);
  ASSERT_EQ(history.workers_size(), 2);
  EXPECT_EQ(history.workers(1).worker_id(), b);
  EXPECT_EQ(history.workers(1).node_name(), "b");
  EXPECT_EQ(history.workers(1).slow_steps(), 20u);
  EXPECT_EQ(history.workers(0).slow_steps(), 0u);
  EXPECT_EQ(history.workers(0).points_size(), 20);
  EXPECT_EQ(history.bytes_pushed(), 4000u);
  EXPECT_EQ(job.result().bytes_pushed(), 4000u);
  EXPECT_EQ(job.result().bytes_pulled(), 8000u);

  Reply unknown;
  request.set_job_id("job-404-0000");
  coordinator_->HandleGetJobHistory(request, &history, Done(unknown));
  EXPECT_EQ(unknown.status.code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, AJobsResultCountsOnlyItsOwnTrafficOnLongLivedWorkers) {
  RegisterShards();
  const std::string a = MustRegister("a");
  auto run = [&](uint64_t generation, uint64_t bytes_per_heartbeat) {
    const v1::Job job = Submit(Spec(1, 1));
    coordinator_->Tick();
    Beat(a, 0, v1::WORKER_IDLE);
    uint64_t counted = 0;
    for (uint64_t step = 1; step <= 20; ++step) {
      counted += bytes_per_heartbeat;
      v1::HeartbeatRequest request =
          StepsBeat(a, generation, step == 20 ? v1::WORKER_FINISHED : v1::WORKER_TRAINING, step,
                    step, 0.1, counted);
      v1::HeartbeatResponse reply;
      Reply r;
      coordinator_->HandleHeartbeat(request, &reply, Done(r));
      EXPECT_TRUE(r.status.ok()) << r.status;
    }
    shards_["ps0:1"].bytes_in += 1u << 30;  // The shards count since they started.
    coordinator_->PollShards();
    EXPECT_EQ(GetJob().state(), v1::COMPLETED);
    return GetJob().result();
  };
  EXPECT_EQ(run(1, 1000).bytes_pushed(), 20000u);
  EXPECT_EQ(run(2, 10).bytes_pushed(), 200u) << "not the worker's or the shards' lifetime count";
}

TEST_F(CoordinatorTest, HeartbeatHistoryFieldsAreBounded) {
  RegisterShards();
  Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  auto status_of = [&](const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse reply;
    Reply r;
    coordinator_->HandleHeartbeat(request, &reply, Done(r));
    return r.status;
  };
  EXPECT_TRUE(status_of(StepsBeat(a, 1, v1::WORKER_TRAINING, 1, kMaxStepReports, 0.1, 0)).ok());
  const absl::Status many =
      status_of(StepsBeat(a, 1, v1::WORKER_TRAINING, 1, kMaxStepReports + 1, 0.1, 0));
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(many.message()), HasSubstr("steps: at most 1024"));
  v1::HeartbeatRequest stranger = StepsBeat(a, 1, v1::WORKER_TRAINING, 2000, 2000, 0.1, 0);
  stranger.set_bytes_pushed(~uint64_t{0});
  const absl::Status huge = status_of(stranger);
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.message()), HasSubstr("bytes_pushed: must be at most 2^53"));
  v1::JobHistory history;
  Reply r;
  coordinator_->HandleGetJobHistory(v1::GetJobHistoryRequest(), &history, Done(r));
  EXPECT_EQ(history.bytes_pushed(), 0u) << "a refused heartbeat counts for nothing";
  EXPECT_EQ(history.workers(0).steps(), static_cast<uint64_t>(kMaxStepReports));
}

class CoordinatorRestartTest : public CoordinatorTest {
 protected:
  CoordinatorOptions Persistent() {
    CoordinatorOptions options = Options();
    options.state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return options;
  }
};

TEST_F(CoordinatorRestartTest, JobsEventsAndGenerationSurviveARestart) {
  Make(Persistent());
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  Beat(a, 1, v1::WORKER_TRAINING, 6);
  ASSERT_TRUE(Control("pause", "before restart").ok());
  ASSERT_TRUE(Control("resume").ok());
  coordinator_->Tick();

  Make(Persistent());  // The restarted coordinator.
  v1::Job restored = GetJob();
  EXPECT_EQ(restored.job_id(), job.job_id());
  EXPECT_EQ(restored.state(), v1::RENDEZVOUS);
  EXPECT_EQ(restored.step(), 6u);
  EXPECT_THAT(restored.state_reason(), HasSubstr("coordinator restarted"));
  EXPECT_THAT(Events(), HasSubstr("paused: before restart"));
  // Workers are unknown now and register again; the generation number goes on.
  Beat(a, 1);
  EXPECT_EQ(last_heartbeat_status_.code(), absl::StatusCode::kNotFound);
  // The shards are remembered: they register only when they start.
  ASSERT_EQ(coordinator_->GetClusterStatus().shards_size(), 2);
  const std::string a_again = MustRegister("a");
  coordinator_->Tick();
  const v1::HeartbeatResponse reply = Beat(a_again, 0, v1::WORKER_IDLE);
  ASSERT_EQ(reply.action(), v1::ACTION_RENDEZVOUS);
  EXPECT_EQ(reply.assignment().generation(), 2u);
  EXPECT_EQ(reply.assignment().job_id(), job.job_id());
}

TEST_F(CoordinatorRestartTest, TornStateFileIsDetectedAndReported) {
  const CoordinatorOptions options = Persistent();
  Make(options);
  Submit(Spec(1, 1));
  coordinator_.reset();
  StateFile file(options.state_dir);
  // Both versions torn: refuse to start rather than silently lose the jobs.
  for (const std::string& path : {file.path(), file.previous_path()}) {
    std::ifstream in(path);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::ofstream(path, std::ios::trunc) << bytes.str().substr(0, bytes.str().size() / 2);
  }
  Coordinator restarted(options, &clock_, &shards_);
  const absl::Status started = restarted.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(started.message(), HasSubstr("torn"));
  EXPECT_THAT(started.message(), HasSubstr(file.path()));
}

TEST_F(CoordinatorRestartTest, TornCurrentFileFallsBackToThePreviousOne) {
  const CoordinatorOptions options = Persistent();
  Make(options);
  const v1::Job job = Submit(Spec(1, 1));
  ASSERT_TRUE(Control("stop", "first").ok());
  coordinator_.reset();
  StateFile file(options.state_dir);
  std::ofstream(file.path(), std::ios::trunc) << "tributary-coordinator-state v1 bytes=99";
  Make(options);
  v1::Job restored = GetJob();
  EXPECT_EQ(restored.job_id(), job.job_id());
  EXPECT_THAT(Events(), HasSubstr("using the previous version"));
}

TEST_F(CoordinatorRestartTest, HistoryIsWrittenToTheStateDirAndSurvivesARestart) {
  const CoordinatorOptions options = Persistent();
  Make(options);
  RegisterShards();
  const v1::Job job = Submit(Spec(1, 1));
  const std::string a = MustRegister("a");
  coordinator_->Tick();
  Beat(a, 0, v1::WORKER_IDLE);
  for (uint64_t step = 1; step <= 20; ++step) {
    v1::HeartbeatRequest request = StepsBeat(
        a, 1, step == 20 ? v1::WORKER_FINISHED : v1::WORKER_TRAINING, step, step, 0.1, step * 10,
        step % 10 == 0 ? std::vector<uint64_t>{step} : std::vector<uint64_t>{});
    v1::HeartbeatResponse reply;
    Reply r;
    coordinator_->HandleHeartbeat(request, &reply, Done(r));
    ASSERT_TRUE(r.status.ok()) << r.status;
  }
  ASSERT_EQ(GetJob().state(), v1::COMPLETED);
  coordinator_->Tick();  // The job ended: its history is written at once.
  absl::StatusOr<v1::JobHistory> file = LoadHistoryFile(options.state_dir, job.job_id());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->steps_size(), 20);
  EXPECT_EQ(file->evaluations_size(), 2);
  EXPECT_EQ(file->bytes_pushed(), 200u);

  Make(options);  // The restarted coordinator.
  v1::JobHistory history;
  Reply r;
  coordinator_->HandleGetJobHistory(v1::GetJobHistoryRequest(), &history, Done(r));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(history.SerializeAsString(), file->SerializeAsString());
}

}  // namespace
}  // namespace tributary::coordinator
