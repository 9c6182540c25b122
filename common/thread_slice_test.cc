#include "common/thread_slice.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>

#include "common/thread_name.h"

namespace tributary {
namespace {

// Runs fn on a thread of its own (the slice is per thread: the test's stays untouched).
template <typename Fn>
void OnAThread(Fn fn) {
  std::thread thread(fn);
  thread.join();
}

// Whether this kernel keeps a requested slice per thread (Linux 6.12 and later).
bool KernelKeepsSlices() {
  bool keeps = false;
  OnAThread([&] {
    absl::StatusOr<absl::Duration> kept = RequestThreadSlice(absl::Microseconds(200));
    keeps = kept.ok() && *kept == absl::Microseconds(200);
  });
  return keeps;
}

TEST(ThreadSliceTest, AThreadGetsTheSliceItAsksForAndItsNiceValueStays) {
  if (!KernelKeepsSlices()) GTEST_SKIP() << "this kernel keeps no slice per thread (< 6.12)";
  OnAThread([] {
    ASSERT_EQ(::setpriority(PRIO_PROCESS, ::gettid(), 3), 0);
    absl::StatusOr<absl::Duration> kept = RequestThreadSlice(absl::Microseconds(100));
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, absl::Microseconds(100));
    EXPECT_EQ(::getpriority(PRIO_PROCESS, ::gettid()), 3) << "the nice value is kept";
    // Zero goes back to the kernel's default, whatever it is.
    kept = RequestThreadSlice(absl::ZeroDuration());
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_NE(*kept, absl::Microseconds(100));
  });
}

TEST(ThreadSliceTest, SlicesOutsideTheKernelsBoundsAreRefusedByName) {
  for (const absl::Duration bad :
       {absl::Microseconds(99), absl::Milliseconds(101), absl::Microseconds(-5)}) {
    absl::StatusOr<absl::Duration> kept = RequestThreadSlice(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(kept.status())) << kept.status();
    EXPECT_NE(kept.status().message().find("thread slice"), std::string::npos);
    const absl::Status set = SetHandoffSlice(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(set)) << set;
  }
  EXPECT_EQ(HandoffSlice(), absl::ZeroDuration()) << "a refused setting changes nothing";
}

TEST(ThreadSliceTest, HandoffThreadsAskForTheProcesssSliceAndOtherThreadsDoNot) {
  if (!KernelKeepsSlices()) GTEST_SKIP() << "this kernel keeps no slice per thread (< 6.12)";
  absl::Duration kernel_default, unset, handoff, named_only, after_reset;
  OnAThread([&] { kernel_default = *ThreadSlice(); });
  ASSERT_NE(kernel_default, absl::Microseconds(150));
  OnAThread([&] {
    NameHandoffThread("push");  // No slice set for the process yet.
    unset = *ThreadSlice();
  });
  ASSERT_TRUE(SetHandoffSlice(absl::Microseconds(150)).ok());
  EXPECT_EQ(HandoffSlice(), absl::Microseconds(150));
  OnAThread([&] {
    NameHandoffThread("shard-read");
    EXPECT_EQ(ThisThreadName(), "shard-read");
    handoff = *ThreadSlice();
  });
  OnAThread([&] {
    NameThisThread("train");  // A compute thread is only named.
    named_only = *ThreadSlice();
  });
  ASSERT_TRUE(SetHandoffSlice(absl::ZeroDuration()).ok());
  OnAThread([&] {
    NameHandoffThread("lane-read");
    after_reset = *ThreadSlice();
  });
  EXPECT_EQ(unset, kernel_default);
  EXPECT_EQ(handoff, absl::Microseconds(150));
  EXPECT_EQ(named_only, kernel_default);
  EXPECT_EQ(after_reset, kernel_default);
}

}  // namespace
}  // namespace tributary
