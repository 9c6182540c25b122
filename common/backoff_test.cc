#include "common/backoff.h"

#include <gtest/gtest.h>

namespace tributary {
namespace {

TEST(BackoffTest, DoublesUpToTheCeilingAndResets) {
  Backoff backoff(absl::Milliseconds(100), absl::Milliseconds(350));
  EXPECT_EQ(backoff.Peek(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(350));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(350));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
  // A ceiling below the first delay is the first delay.
  Backoff flat(absl::Seconds(1), absl::Milliseconds(1));
  EXPECT_EQ(flat.Next(), absl::Seconds(1));
  EXPECT_EQ(flat.Next(), absl::Seconds(1));
}

}  // namespace
}  // namespace tributary
