// WorkerControl's decisions, table by table: the coordinator's answers in, what the
// worker does at a step boundary, while holding and between generations out.
#include "worker/worker_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;
using Boundary = WorkerControl::AtBoundary;
using Next = WorkerControl::Next;

v1::HeartbeatResponse Action(v1::WorkerAction action, uint64_t generation = 0) {
  v1::HeartbeatResponse response;
  response.set_action(action);
  if (generation > 0) {
    response.mutable_assignment()->set_job_id("job-1");
    response.mutable_assignment()->set_generation(generation);
  }
  return response;
}

v1::HeartbeatResponse PauseAt(std::optional<uint64_t> step) {
  v1::HeartbeatResponse response = Action(v1::ACTION_PAUSE);
  response.set_message("operator");
  if (step.has_value()) response.set_pause_at_step(*step);
  return response;
}

class WorkerControlTest : public ::testing::Test {
 protected:
  // Running generation `generation` of job-1.
  void Running(uint64_t generation) {
    control_.Answered(Action(v1::ACTION_RENDEZVOUS, generation), 0);
    ASSERT_EQ(control_.NextWork(), Next::kRun);
    control_.Began(control_.pending());
  }

  FakeClock clock_;
  WorkerControl control_{&clock_};
};

TEST_F(WorkerControlTest, AnAssignmentIsRunOnceAndANewerOneInterrupts) {
  EXPECT_EQ(control_.NextWork(), Next::kWait);
  Running(3);
  EXPECT_EQ(control_.NextWork(), Next::kWait);
  EXPECT_EQ(control_.Interruption(false), "");
  // The same or an older generation again changes nothing.
  for (uint64_t generation : {2, 3}) {
    EXPECT_EQ(control_.Answered(Action(v1::ACTION_RENDEZVOUS, generation), 3), "");
    EXPECT_EQ(control_.NextWork(), Next::kWait);
  }
  EXPECT_THAT(control_.Answered(Action(v1::ACTION_RENDEZVOUS, 4), 3), HasSubstr("generation 4"));
  EXPECT_EQ(control_.Interruption(false), "new generation 4");
  EXPECT_EQ(control_.NextWork(), Next::kRun);
  EXPECT_EQ(control_.Interruption(true), "shutting down");  // Shutdown comes first.
}

// The pause protocol, one heartbeat answer at a time, for a SYNC worker at the boundary
// before step 10.
TEST_F(WorkerControlTest, PauseHoldsAtTheCommonBoundaryTable) {
  Running(1);
  struct Row {
    const char* what;
    v1::HeartbeatResponse answer;
    uint64_t step;
    Boundary expected;
    bool pausing_released;  // A worker holding as WORKER_PAUSING may go on.
    bool paused_released;   // A worker holding as WORKER_PAUSED may go on.
  };
  const std::vector<Row> rows = {
      {"running", Action(v1::ACTION_CONTINUE), 10, Boundary::kGoOn, true, true},
      {"pause asked, no boundary yet", PauseAt(std::nullopt), 10, Boundary::kAwaitBoundary, false,
       false},
      {"boundary named ahead", PauseAt(12), 10, Boundary::kGoOn, true, false},
      {"at the boundary", PauseAt(12), 12, Boundary::kHold, true, false},
      {"past the boundary (joined late)", PauseAt(12), 13, Boundary::kHold, true, false},
      {"resumed", Action(v1::ACTION_CONTINUE), 12, Boundary::kGoOn, true, true},
      {"paused again", PauseAt(std::nullopt), 12, Boundary::kAwaitBoundary, false, false},
      {"a new generation instead", Action(v1::ACTION_RENDEZVOUS, 2), 12, Boundary::kGoOn, true,
       true},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    control_.Answered(row.answer, 1);
    EXPECT_EQ(control_.Boundary(row.step, /*independent=*/false, false), row.expected);
    EXPECT_EQ(control_.Released(v1::WORKER_PAUSING, false), row.pausing_released);
    EXPECT_EQ(control_.Released(v1::WORKER_PAUSED, false), row.paused_released);
  }
}

TEST_F(WorkerControlTest, AnAnswerThatPausesAndNamesTheBoundarySaysBoth) {
  Running(1);
  const std::string said = control_.Answered(PauseAt(12), 1);
  EXPECT_THAT(said, HasSubstr("pausing: operator"));
  EXPECT_THAT(said, HasSubstr("every worker pauses before step 12"));
  EXPECT_EQ(control_.Answered(PauseAt(12), 1), "");  // Nothing new.
}

TEST_F(WorkerControlTest, AnAsyncWorkerPausesWhereItIsAndAStopOrShutdownReleasesIt) {
  Running(1);
  control_.Answered(PauseAt(std::nullopt), 1);
  EXPECT_EQ(control_.Boundary(7, /*independent=*/true, false), Boundary::kHold);
  EXPECT_FALSE(control_.Released(v1::WORKER_PAUSED, false));
  EXPECT_TRUE(control_.Released(v1::WORKER_PAUSED, /*shutting_down=*/true));
  EXPECT_EQ(control_.Boundary(7, true, /*shutting_down=*/true), Boundary::kLeave);
  control_.Answered(Action(v1::ACTION_STOP), 1);
  EXPECT_FALSE(control_.paused());
  EXPECT_TRUE(control_.Released(v1::WORKER_PAUSED, false));
  EXPECT_EQ(control_.Interruption(false), "job stopped");
}

TEST_F(WorkerControlTest, AStopEndsTheJobItNamesOnly) {
  Running(1);
  // A stop answering a heartbeat of an older generation is not for this one.
  EXPECT_EQ(control_.Answered(Action(v1::ACTION_STOP), 0), "");
  EXPECT_EQ(control_.NextWork(), Next::kWait);
  // Nor while a newer assignment waits to be taken (the next job's).
  control_.Answered(Action(v1::ACTION_RENDEZVOUS, 2), 1);
  control_.Answered(Action(v1::ACTION_STOP), 1);
  EXPECT_EQ(control_.NextWork(), Next::kRun);
  control_.Began(control_.pending());
  EXPECT_THAT(control_.Answered(Action(v1::ACTION_STOP), 2), HasSubstr("job ended"));
  EXPECT_EQ(control_.NextWork(), Next::kJobOver);
  control_.ForgetJob();
  EXPECT_EQ(control_.NextWork(), Next::kWait);
  EXPECT_EQ(control_.current().generation(), 0u);
  EXPECT_EQ(control_.Interruption(false), "");
  // The next job's assignment after the stop runs.
  control_.Answered(Action(v1::ACTION_RENDEZVOUS, 3), 0);
  EXPECT_EQ(control_.NextWork(), Next::kRun);
}

TEST_F(WorkerControlTest, HeartbeatsFollowTheIntervalTheCoordinatorGives) {
  control_.HeartbeatSent();
  EXPECT_EQ(control_.NextHeartbeat(), clock_.Now() + absl::Seconds(1));
  v1::RegisterWorkerResponse registered;
  registered.set_heartbeat_interval_ms(250);
  registered.mutable_assignment()->set_generation(5);
  control_.Registered(registered);
  EXPECT_EQ(control_.NextHeartbeat(), clock_.Now() + absl::Milliseconds(250));
  EXPECT_EQ(control_.NextWork(), Next::kRun);  // Registration may carry an assignment.
  clock_.Advance(absl::Seconds(3));
  control_.HeartbeatSent();
  v1::HeartbeatResponse slower = Action(v1::ACTION_WAIT);
  slower.set_heartbeat_interval_ms(2000);
  control_.Answered(slower, 0);
  EXPECT_EQ(control_.NextHeartbeat(), clock_.Now() + absl::Seconds(2));
}

}  // namespace
}  // namespace tributary::worker
