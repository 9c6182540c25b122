// Byte totals across generations: each session's PS client counts from zero, the
// worker's totals must keep growing.
#include "worker/byte_totals.h"

#include <gtest/gtest.h>

namespace tributary::worker {
namespace {

TEST(ByteTotalsTest, ASecondSessionAddsToTheFirstInsteadOfReplacingIt) {
  ByteTotals totals;
  totals.BeginSession();
  EXPECT_EQ(totals.Update(100), 100u);
  EXPECT_EQ(totals.Update(250), 150u);
  EXPECT_EQ(totals.total(), 250u);

  // A new generation: its client starts again at zero and has moved less so far.
  totals.BeginSession();
  EXPECT_EQ(totals.Update(40), 40u);
  EXPECT_EQ(totals.total(), 290u);
  EXPECT_EQ(totals.Update(90), 50u);
  EXPECT_EQ(totals.total(), 340u);
}

TEST(ByteTotalsTest, ARepeatedCountAddsNothing) {
  ByteTotals totals;
  totals.BeginSession();
  EXPECT_EQ(totals.Update(0), 0u);
  EXPECT_EQ(totals.Update(64), 64u);
  EXPECT_EQ(totals.Update(64), 0u);
  EXPECT_EQ(totals.total(), 64u);
}

}  // namespace
}  // namespace tributary::worker
