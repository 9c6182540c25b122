#include "worker/update_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace tributary::worker {
namespace {

// Partitions [0, 40), [40, 80), [80, 100).
UpdateGate ThreePartitions() { return UpdateGate({40, 80, 100}); }

TEST(UpdateGateTest, StartsOpen) {
  UpdateGate gate = ThreePartitions();
  EXPECT_TRUE(gate.Ready(0, 100));
  EXPECT_FALSE(gate.WaitFor(0, 100));
  EXPECT_TRUE(gate.WaitDone().ok());
}

TEST(UpdateGateTest, AForwardWaitsOnlyForWhatItReads) {
  UpdateGate gate = ThreePartitions();
  gate.Begin();
  EXPECT_FALSE(gate.Ready(0, 1));
  gate.Applied(0);
  EXPECT_TRUE(gate.Ready(0, 40));
  EXPECT_TRUE(gate.Ready(10, 20));
  EXPECT_FALSE(gate.Ready(0, 41));
  EXPECT_FALSE(gate.Ready(40, 41));
  std::atomic<bool> released{false};
  std::thread forward([&] {
    EXPECT_TRUE(gate.WaitFor(30, 80));
    released = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(released) << "[40, 80) is still missing";
  gate.Applied(1);
  forward.join();
  EXPECT_TRUE(released);
  gate.Finish(absl::OkStatus());
  EXPECT_TRUE(gate.Ready(0, 100));
}

TEST(UpdateGateTest, UpdatesMayComeBackInAnyOrderAndReadersAskInAnyOrder) {
  // The shards answer the last partition first (the order backward finished them);
  // the forward may read the last partition first too.
  UpdateGate gate = ThreePartitions();
  gate.Begin();
  gate.Applied(2);
  EXPECT_TRUE(gate.Ready(80, 100));
  EXPECT_TRUE(gate.Ready(99, 100));
  EXPECT_FALSE(gate.Ready(79, 100)) << "element 79 lies in the missing partition 1";
  EXPECT_FALSE(gate.Ready(0, 10));
  EXPECT_FALSE(gate.WaitFor(85, 90));
  std::atomic<int> released{0};
  std::thread first_layer([&] {
    EXPECT_TRUE(gate.WaitFor(0, 40));
    ++released;
  });
  std::thread middle([&] {
    EXPECT_TRUE(gate.WaitFor(40, 80));
    ++released;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(released, 0);
  gate.Applied(1);
  middle.join();
  EXPECT_EQ(released, 1) << "partition 0 is still missing";
  gate.Applied(0);
  first_layer.join();
  EXPECT_EQ(released, 2);
  // Out-of-range indices change nothing; an empty range is always ready.
  gate.Begin();
  gate.Applied(-1);
  gate.Applied(3);
  EXPECT_FALSE(gate.Ready(0, 100));
  EXPECT_TRUE(gate.Ready(100, 100));
}

TEST(UpdateGateTest, AFailedUpdateReleasesEveryoneAndSticks) {
  UpdateGate gate = ThreePartitions();
  gate.Begin();
  std::thread forward([&] { gate.WaitFor(0, 100); });
  std::thread finish([&] { EXPECT_EQ(gate.WaitDone().code(), absl::StatusCode::kAborted); });
  gate.Finish(absl::AbortedError("update of step 4 interrupted: new generation 5"));
  forward.join();
  finish.join();
  gate.Begin();
  gate.Finish(absl::OkStatus());
  EXPECT_EQ(gate.status().message(), "update of step 4 interrupted: new generation 5");
}

TEST(UpdateGateTest, CloseReleasesWaitersForGood) {
  UpdateGate gate({10});
  gate.Begin();
  absl::Notification waiting;
  std::thread waiter([&] {
    waiting.Notify();
    gate.WaitDone().IgnoreError();
  });
  waiting.WaitForNotification();
  gate.Close();
  waiter.join();
  EXPECT_TRUE(gate.Ready(0, 10));
}

}  // namespace
}  // namespace tributary::worker
