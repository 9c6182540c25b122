#include "worker/update_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace tributary::worker {
namespace {

TEST(UpdateGateTest, StartsOpen) {
  UpdateGate gate(100);
  EXPECT_TRUE(gate.Ready(100));
  EXPECT_FALSE(gate.WaitFor(100));
  EXPECT_TRUE(gate.WaitDone().ok());
}

TEST(UpdateGateTest, AForwardWaitsOnlyForWhatItReads) {
  UpdateGate gate(100);
  gate.Begin();
  EXPECT_FALSE(gate.Ready(1));
  gate.Applied(40);
  EXPECT_TRUE(gate.Ready(40));
  EXPECT_FALSE(gate.Ready(41));
  std::atomic<bool> released{false};
  std::thread forward([&] {
    EXPECT_TRUE(gate.WaitFor(80));
    released = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(released) << "60 elements are still missing";
  gate.Applied(80);
  forward.join();
  EXPECT_TRUE(released);
  gate.Finish(absl::OkStatus());
  EXPECT_TRUE(gate.Ready(100));
}

TEST(UpdateGateTest, AFailedUpdateReleasesEveryoneAndSticks) {
  UpdateGate gate(100);
  gate.Begin();
  std::thread forward([&] { gate.WaitFor(100); });
  std::thread finish([&] { EXPECT_EQ(gate.WaitDone().code(), absl::StatusCode::kAborted); });
  gate.Finish(absl::AbortedError("update of step 4 interrupted: new generation 5"));
  forward.join();
  finish.join();
  gate.Begin();
  gate.Finish(absl::OkStatus());
  EXPECT_EQ(gate.status().message(), "update of step 4 interrupted: new generation 5");
}

TEST(UpdateGateTest, CloseReleasesWaitersForGood) {
  UpdateGate gate(10);
  gate.Begin();
  absl::Notification waiting;
  std::thread waiter([&] {
    waiting.Notify();
    gate.WaitDone().IgnoreError();
  });
  waiting.WaitForNotification();
  gate.Close();
  waiter.join();
  EXPECT_TRUE(gate.Ready(10));
}

}  // namespace
}  // namespace tributary::worker
