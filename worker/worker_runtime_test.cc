// WorkerRuntime's control logic against a scripted coordinator (FakeCoordinatorLink):
// registration and its retries, heartbeats, re-registration, failures reported in the
// heartbeat, the end of a job and leaving.
#include "worker/worker_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <thread>

#include "common/job_spec.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/testing/in_memory_ps.h"
#include "worker/testing/fake_coordinator_link.h"

namespace tributary::worker {
namespace {

using testing::FakeCoordinatorLink;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

WorkerOptions Options() {
  WorkerOptions options;
  options.coordinator_address = "fake:1";
  options.node_name = "node-a";
  options.register_timeout = absl::Seconds(30);
  return options;
}

// An assignment of generation `generation` whose data cannot be loaded.
v1::Assignment BrokenAssignment(uint64_t generation) {
  v1::Assignment assignment;
  assignment.set_job_id("job-1");
  assignment.set_generation(generation);
  assignment.set_num_nodes(1);
  assignment.set_world_size(1);
  assignment.set_local_world_size(1);
  assignment.set_replicas(1);
  assignment.set_total_replicas(1);
  assignment.set_node_leader(true);
  v1::DatasetSpec& dataset = *assignment.mutable_job()->mutable_dataset();
  dataset.set_format(v1::IDX);
  dataset.set_directory("/nonexistent/fashion-mnist");
  return assignment;
}

// A 4-step job of a small MLP on synthetic data, one worker with one CPU replica,
// against one PS shard (the test's in-memory one); rank 0 evaluates after each step.
v1::Assignment SmallJob() {
  v1::JobSpec spec;
  spec.mutable_model()->set_name("mlp");
  for (uint32_t size : {8, 6, 3}) spec.mutable_model()->add_layer_sizes(size);
  spec.mutable_dataset()->set_format(v1::SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_train_samples(64);
  spec.mutable_dataset()->set_synthetic_test_samples(32);
  spec.mutable_dataset()->set_synthetic_features(8);
  spec.mutable_dataset()->set_synthetic_classes(3);
  spec.set_global_batch_size(16);
  spec.set_max_steps(4);
  spec.set_epochs(0);
  spec.set_devices(v1::CPU);
  spec.set_partition_cut(v1::CUT_EVEN);  // The coordinator's choice for a CPU job.
  spec = WithDefaults(spec);
  v1::Assignment assignment;
  assignment.set_job_id("job-end");
  assignment.set_generation(1);
  assignment.set_num_nodes(1);
  assignment.set_world_size(1);
  assignment.set_local_world_size(1);
  assignment.set_replicas(1);
  assignment.set_total_replicas(1);
  assignment.set_node_replicas(1);
  assignment.set_node_leader(true);
  v1::Device* cpu = assignment.add_devices();
  cpu->set_kind(v1::CPU);
  cpu->set_name("cpu");
  v1::ShardInfo* shard = assignment.add_shards();
  shard->set_shard_index(0);
  shard->set_address("in-memory:0");
  *assignment.mutable_job() = spec;
  return assignment;
}

class WorkerRuntimeTest : public ::testing::Test {
 protected:
  WorkerRuntimeTest() { shard_.set_shard_index(0).IgnoreError(); }

  // Options whose sessions reach the test's shard in memory, without gRPC.
  WorkerOptions InMemoryOptions() {
    WorkerOptions options = Options();
    options.ps_connection = [this](const PsIdentity& identity, const v1::PartitionPlan& plan) {
      return std::make_unique<ps::testing::InMemoryPsConnection>(
          std::vector<ps::ParameterShard*>{&shard_}, identity, plan, v1::SYNC, v1::FLOAT32);
    };
    return options;
  }

  void Start(WorkerOptions options = Options()) {
    auto link = std::make_unique<FakeCoordinatorLink>();
    link_ = link.get();
    Script(*link_);
    runtime_ = std::make_unique<WorkerRuntime>(std::move(options), registry_, std::move(link));
    thread_ = std::thread([this] { result_ = runtime_->Run(shutdown_); });
  }
  // Set before Start, to script the fake before the runtime's first call.
  std::function<void(FakeCoordinatorLink&)> Script = [](FakeCoordinatorLink&) {};

  absl::Status Join() {
    thread_.join();
    return result_;
  }

  void TearDown() override {
    if (thread_.joinable()) {
      shutdown_.Request("test over");
      thread_.join();
    }
  }

  ps::ParameterShard shard_{ps::ShardOptions{}, nullptr};
  prometheus::Registry registry_;
  ShutdownSignal shutdown_;
  FakeCoordinatorLink* link_ = nullptr;
  std::unique_ptr<WorkerRuntime> runtime_;
  std::thread thread_;
  absl::Status result_;
};

TEST_F(WorkerRuntimeTest, RetriesAnUnreachableCoordinatorHeartbeatsAndLeavesWhenDrained) {
  Script = [](FakeCoordinatorLink& link) {
    link.FailRegistrations(
        {absl::UnavailableError("connection refused"), absl::DeadlineExceededError("deadline")});
  };
  Start();
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) {
        return beat.worker_id() == "w1" && beat.phase() == v1::WORKER_IDLE;
      },
      kWait));
  EXPECT_EQ(runtime_->GetStatus().worker_id(), "w1");
  EXPECT_EQ(runtime_->Drain("maintenance"), v1::WORKER_DRAINING);
  ASSERT_TRUE(Join().ok()) << result_;
  ASSERT_EQ(link_->deregistrations().size(), 1u);
  EXPECT_EQ(link_->deregistrations()[0].worker_id(), "w1");
  EXPECT_THAT(link_->deregistrations()[0].reason(), HasSubstr("drain: maintenance"));
  EXPECT_EQ(runtime_->GetStatus().phase(), v1::WORKER_DRAINING);
}

TEST_F(WorkerRuntimeTest, ARefusedRegistrationIsReturned) {
  Script = [](FakeCoordinatorLink& link) {
    link.FailRegistrations({absl::ResourceExhaustedError(
        "RegisterWorker: node node-a: GPU 1 is already requested by worker w7")});
  };
  Start();
  const absl::Status status = Join();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("GPU 1 is already requested"));
  EXPECT_TRUE(link_->deregistrations().empty());
}

TEST_F(WorkerRuntimeTest, GivesUpOnACoordinatorThatNeverAnswers) {
  Script = [](FakeCoordinatorLink& link) {
    link.FailRegistrations(std::vector<absl::Status>(1000, absl::UnavailableError("refused")));
  };
  WorkerOptions options = Options();
  options.register_timeout = absl::Milliseconds(300);
  Start(options);
  const absl::Status status = Join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("the coordinator at fake:1 did not answer within 300ms; last: refused"));
}

// A restarted coordinator issues worker credentials under a new key: it refuses the old
// one (PERMISSION_DENIED, before it could say it does not know the id), and the worker
// registers again.
TEST_F(WorkerRuntimeTest, AWorkerWhoseCredentialIsRefusedRegistersAgain) {
  Script = [](FakeCoordinatorLink& link) {
    link.OnHeartbeat([](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      if (beat.worker_id() == "w1") {
        return absl::PermissionDeniedError(
            "Heartbeat: the caller is not worker 'w1' (a wrong 'x-tributary-worker' credential)");
      }
      v1::HeartbeatResponse wait;
      wait.set_action(v1::ACTION_WAIT);
      return wait;
    });
  };
  Start();
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) { return beat.worker_id() == "w2"; }, kWait));
  EXPECT_EQ(link_->registrations(), 2);
}

TEST_F(WorkerRuntimeTest, AForgottenWorkerRegistersAgain) {
  Script = [](FakeCoordinatorLink& link) {
    link.OnHeartbeat([](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      if (beat.worker_id() == "w1") return absl::NotFoundError("unknown worker id 'w1'");
      v1::HeartbeatResponse wait;
      wait.set_action(v1::ACTION_WAIT);
      return wait;
    });
  };
  Start();
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) { return beat.worker_id() == "w2"; }, kWait));
  EXPECT_EQ(link_->registrations(), 2);
}

TEST_F(WorkerRuntimeTest, AJobWhoseDataCannotLoadIsReportedAsFailedNamingTheFile) {
  Script = [](FakeCoordinatorLink& link) {
    link.OnHeartbeat([](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      v1::HeartbeatResponse response;
      response.set_action(v1::ACTION_WAIT);
      if (beat.generation() == 0) {
        response.set_action(v1::ACTION_RENDEZVOUS);
        *response.mutable_assignment() = BrokenAssignment(3);
      }
      return response;
    });
  };
  Start();
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) {
        return beat.generation() == 3 && beat.phase() == v1::WORKER_FAILED;
      },
      kWait));
  const v1::WorkerStatus status = runtime_->GetStatus();
  EXPECT_EQ(status.phase(), v1::WORKER_FAILED);
  EXPECT_THAT(status.error(), HasSubstr("/nonexistent/fashion-mnist"));
  EXPECT_EQ(status.assignment().generation(), 3u);
}

TEST_F(WorkerRuntimeTest, WithExitAfterJobItLeavesOnceTheJobStops) {
  Script = [](FakeCoordinatorLink& link) {
    link.OnHeartbeat([](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      v1::HeartbeatResponse response;
      if (beat.generation() == 0) {
        response.set_action(v1::ACTION_RENDEZVOUS);
        *response.mutable_assignment() = BrokenAssignment(5);
      } else {
        response.set_action(v1::ACTION_STOP);
        response.set_message("job job-1 FAILED: every registered worker (1) failed");
      }
      return response;
    });
  };
  WorkerOptions options = Options();
  options.exit_after_job = true;
  Start(options);
  ASSERT_TRUE(Join().ok()) << result_;
  ASSERT_EQ(link_->deregistrations().size(), 1u);
  EXPECT_EQ(link_->deregistrations()[0].reason(), "job finished");
}

// Rank 0 restarted after the shards reached the last step: its generation has nothing
// left to train, and it still evaluates before it says it finished, so the job's
// result has its accuracy (it used to complete with test_accuracy -1).
TEST_F(WorkerRuntimeTest, AGenerationFormedAfterTheLastStepStillEvaluates) {
  v1::Assignment assignment = SmallJob();
  auto script = [](v1::Assignment given) {
    return [given](FakeCoordinatorLink& link) {
      link.OnHeartbeat(
          [given](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
            v1::HeartbeatResponse response;
            response.set_action(v1::ACTION_WAIT);
            if (beat.generation() == 0) {
              response.set_action(v1::ACTION_RENDEZVOUS);
              *response.mutable_assignment() = given;
            }
            return response;
          });
    };
  };
  auto finished_in = [](uint64_t generation, v1::HeartbeatRequest* seen) {
    return [generation, seen](const v1::HeartbeatRequest& beat) {
      if (beat.generation() != generation || beat.phase() != v1::WORKER_FINISHED) return false;
      *seen = beat;
      return true;
    };
  };
  // Generation 1 trains all 4 steps; the shard then stands at the last step.
  assignment.set_generation(1);
  Script = script(assignment);
  Start(InMemoryOptions());
  v1::HeartbeatRequest first;
  ASSERT_TRUE(link_->AwaitHeartbeat(finished_in(1, &first), kWait));
  EXPECT_GE(first.test_accuracy(), 0.0f);
  shutdown_.Request("rank 0 dies at the end");
  thread_.join();

  // A new process of rank 0, in generation 2, which resumes at step 4 of 4.
  assignment.set_generation(2);
  assignment.set_resume_step(4);
  auto link = std::make_unique<FakeCoordinatorLink>();
  FakeCoordinatorLink* restarted_link = link.get();
  script(assignment)(*restarted_link);
  prometheus::Registry registry;
  ShutdownSignal shutdown;
  WorkerRuntime restarted(InMemoryOptions(), registry, std::move(link));
  absl::Status result;
  std::thread thread([&] { result = restarted.Run(shutdown); });
  v1::HeartbeatRequest finished;
  const bool seen = restarted_link->AwaitHeartbeat(finished_in(2, &finished), kWait);
  shutdown.Request("test over");
  thread.join();
  ASSERT_TRUE(seen) << restarted.GetStatus().DebugString();
  EXPECT_GE(finished.test_accuracy(), 0.0f) << "the final evaluation was lost";
  EXPECT_FLOAT_EQ(finished.test_accuracy(), first.test_accuracy())
      << "the same parameters give the same accuracy";
  EXPECT_GT(finished.test_loss(), 0.0f);
}

// The history's raw material: every step run goes to the coordinator exactly once,
// with its measurements, and so does every evaluation; the bytes a heartbeat reports
// are this generation's alone (the coordinator adds them up per job).
TEST_F(WorkerRuntimeTest, HeartbeatsCarryEachStepAndEvaluationOnceAndThisGenerationsBytes) {
  const v1::Assignment first = SmallJob();
  v1::Assignment second = first;
  second.set_generation(2);
  second.set_resume_step(4);  // Nothing left to train: it pulls and evaluates.
  Script = [first, second](FakeCoordinatorLink& link) {
    link.OnHeartbeat(
        [first, second](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
          v1::HeartbeatResponse response;
          response.set_action(v1::ACTION_WAIT);
          if (beat.generation() == 0 ||
              (beat.generation() == 1 && beat.phase() == v1::WORKER_FINISHED)) {
            response.set_action(v1::ACTION_RENDEZVOUS);
            *response.mutable_assignment() = beat.generation() == 0 ? first : second;
          } else if (beat.generation() == 1) {
            response.set_action(v1::ACTION_CONTINUE);
          }
          return response;
        });
  };
  Start(InMemoryOptions());
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) {
        return beat.generation() == 2 && beat.phase() == v1::WORKER_FINISHED;
      },
      kWait));
  shutdown_.Request("test over");
  thread_.join();

  std::vector<uint64_t> steps, evaluated;
  uint64_t pushed_in_first = 0;
  const std::vector<v1::HeartbeatRequest> beats = link_->heartbeats();
  for (const v1::HeartbeatRequest& beat : beats) {
    for (const v1::StepReport& step : beat.steps()) {
      EXPECT_EQ(beat.generation(), 1u);
      steps.push_back(step.step());
      EXPECT_EQ(step.samples(), 16u);
      EXPECT_GT(step.step_seconds(), 0);
      EXPECT_LE(step.compute_seconds(), step.step_seconds());
      EXPECT_GT(step.loss(), 0);
    }
    for (const v1::EvaluationReport& evaluation : beat.evaluations()) {
      evaluated.push_back(evaluation.step());
      EXPECT_GE(evaluation.test_accuracy(), 0);
      EXPECT_LE(evaluation.test_accuracy(), 1);
    }
    if (beat.generation() == 1) pushed_in_first = std::max(pushed_in_first, beat.bytes_pushed());
  }
  EXPECT_THAT(steps, ::testing::ElementsAre(1, 2, 3, 4)) << "each step once, in order";
  // About ten evaluations a run: a 4-step job evaluates after every step; the second
  // generation, with nothing left to train, evaluates the final parameters once more.
  EXPECT_THAT(evaluated, ::testing::ElementsAre(1, 2, 3, 4, 4))
      << "after each step, then once more in generation 2";
  EXPECT_GT(pushed_in_first, 0u);
  const v1::HeartbeatRequest& last = beats.back();
  ASSERT_EQ(last.generation(), 2u);
  EXPECT_EQ(last.bytes_pushed(), 0u) << "generation 2 pushed nothing; not the worker's total";
  EXPECT_GT(last.bytes_pulled(), 0u) << "it pulled the parameters";
  EXPECT_GT(runtime_->GetStatus().bytes_pushed(), 0u) << "GetStatus keeps the lifetime total";
}

// The pause protocol end to end in one worker: asked to pause while it trains, it
// reports WORKER_PAUSING with the boundary it can reach, runs on to the boundary the
// coordinator names, holds there as WORKER_PAUSED (its step unchanged, the update of
// the last step applied), and trains on when resumed.
TEST_F(WorkerRuntimeTest, APausedWorkerHoldsAtTheNamedBoundaryAndResumes) {
  v1::Assignment long_job = SmallJob();
  long_job.mutable_job()->set_max_steps(10'000'000);  // Still training when paused.
  auto boundary = std::make_shared<std::atomic<uint64_t>>(0);
  auto resume = std::make_shared<std::atomic<bool>>(false);
  Script = [long_job, boundary, resume](FakeCoordinatorLink& link) {
    link.OnHeartbeat([=](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      v1::HeartbeatResponse response;
      response.set_heartbeat_interval_ms(50);
      response.set_action(v1::ACTION_CONTINUE);
      if (beat.generation() == 0) {
        response.set_action(v1::ACTION_RENDEZVOUS);
        *response.mutable_assignment() = long_job;
      } else if (resume->load()) {
        response.set_action(v1::ACTION_CONTINUE);
      } else if (beat.step() >= 3 || boundary->load() > 0) {
        response.set_action(v1::ACTION_PAUSE);
        response.set_message("test");
        // Named once the worker said where it can stop: a few steps past that.
        if (beat.phase() == v1::WORKER_PAUSING && boundary->load() == 0) {
          boundary->store(beat.holding_at_step() + 5);
        }
        if (boundary->load() > 0) response.set_pause_at_step(boundary->load());
      }
      return response;
    });
  };
  Start(InMemoryOptions());
  v1::HeartbeatRequest paused;
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [&](const v1::HeartbeatRequest& beat) {
        if (beat.phase() != v1::WORKER_PAUSED) return false;
        paused = beat;
        return true;
      },
      kWait));
  EXPECT_GT(boundary->load(), 0u) << "it paused without the common boundary";
  EXPECT_EQ(paused.holding_at_step(), boundary->load());
  EXPECT_EQ(paused.step(), boundary->load()) << "the steps before the boundary, all applied";
  EXPECT_EQ(paused.samples_per_second(), 0) << "a paused worker moves no samples";
  // Still there some heartbeats (50 ms apart) later.
  absl::SleepFor(absl::Milliseconds(300));
  const v1::HeartbeatRequest later = link_->heartbeats().back();
  EXPECT_EQ(later.phase(), v1::WORKER_PAUSED);
  EXPECT_EQ(later.step(), paused.step());
  resume->store(true);
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [&](const v1::HeartbeatRequest& beat) {
        return beat.phase() == v1::WORKER_TRAINING && beat.step() > paused.step() + 2;
      },
      kWait))
      << "it did not train on after the resume";
}

// A worker outlives its jobs: when a job ends (ACTION_STOP) the worker goes back to
// idle, and nothing it reported of that job (its step, loss, accuracy, error) is ever
// reported for the next. Issue 23: a worker whose job failed its model check went on
// reporting that failure, which failed every later job; a new job's first report
// carried the last job's step 600 and accuracy 1.0.
TEST_F(WorkerRuntimeTest, NothingOfAJobIsReportedForTheNext) {
  const v1::Assignment trained = SmallJob();  // job-end, generation 1, 4 steps.
  v1::Assignment broken = BrokenAssignment(2);
  broken.set_job_id("job-2");
  v1::Assignment again = SmallJob();
  again.set_job_id("job-3");
  again.set_generation(3);
  ps::ParameterShard* ps = &shard_;
  Script = [trained, broken, again, ps](FakeCoordinatorLink& link) {
    // The next job is given once the one before was stopped (and, as the coordinator
    // does, ended on the shard).
    auto stopped = std::make_shared<std::set<uint64_t>>();
    link.OnHeartbeat([=](const v1::HeartbeatRequest& beat) -> absl::StatusOr<v1::HeartbeatResponse> {
      v1::HeartbeatResponse response;
      response.set_action(v1::ACTION_WAIT);
      if (beat.generation() == 0 && stopped->size() < 3) {
        response.set_action(v1::ACTION_RENDEZVOUS);
        const v1::Assignment* next[] = {&trained, &broken, &again};
        *response.mutable_assignment() = *next[stopped->size()];
      } else if (beat.phase() == v1::WORKER_FINISHED || beat.phase() == v1::WORKER_FAILED) {
        response.set_action(v1::ACTION_STOP);
        response.set_message("the job is over");
        if (stopped->insert(beat.generation()).second && beat.generation() == 1) {
          v1::EndJobRequest end;
          end.set_job_id("job-end");
          EXPECT_TRUE(ps->EndJob(end).ok());
        }
      } else if (beat.generation() > 0) {
        response.set_action(v1::ACTION_CONTINUE);
      }
      return response;
    });
  };
  Start(InMemoryOptions());
  ASSERT_TRUE(link_->AwaitHeartbeat(
      [](const v1::HeartbeatRequest& beat) {
        return beat.generation() == 3 && beat.phase() == v1::WORKER_FINISHED;
      },
      kWait));
  shutdown_.Request("test over");
  thread_.join();

  bool idle_between = false;
  bool failed_seen = false;
  for (const v1::HeartbeatRequest& beat : link_->heartbeats()) {
    if (beat.generation() == 1) {
      EXPECT_EQ(beat.job_id(), "job-end");
    } else if (beat.generation() == 2) {
      EXPECT_EQ(beat.job_id(), "job-2");
      EXPECT_EQ(beat.step(), 0u) << "job-end's step";
      EXPECT_EQ(beat.loss(), 0.0f) << "job-end's loss";
      EXPECT_LT(beat.test_accuracy(), 0.0f) << "job-end's accuracy";
      failed_seen = failed_seen || beat.phase() == v1::WORKER_FAILED;
    } else if (beat.generation() == 3) {
      EXPECT_EQ(beat.job_id(), "job-3");
      EXPECT_NE(beat.phase(), v1::WORKER_FAILED) << "job-2's failure: " << beat.error();
      EXPECT_EQ(beat.error().find("/nonexistent"), std::string::npos) << beat.error();
      if (beat.phase() != v1::WORKER_FINISHED) {
        EXPECT_LT(beat.test_accuracy(), 0.0f) << "job-end's accuracy before job-3 evaluated";
      }
    } else {
      EXPECT_TRUE(beat.job_id().empty());
      EXPECT_TRUE(beat.error().empty()) << "an ended job's error: " << beat.error();
      EXPECT_NE(beat.phase(), v1::WORKER_FAILED);
      idle_between = idle_between || (failed_seen && beat.phase() == v1::WORKER_IDLE);
    }
  }
  EXPECT_TRUE(failed_seen) << "job-2 failed on this worker";
  EXPECT_TRUE(idle_between) << "the worker went back to idle once job-2 was over";
  EXPECT_TRUE(runtime_->GetStatus().assignment().node_credential().empty());
}

}  // namespace
}  // namespace tributary::worker
