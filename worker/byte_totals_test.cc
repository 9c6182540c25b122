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

TEST(ByteTotalsTest, TheSessionCountIsThisGenerationsAlone) {
  ByteTotals totals;
  totals.BeginSession();
  totals.Update(1000);
  EXPECT_EQ(totals.session(), 1000u);
  totals.BeginSession();
  EXPECT_EQ(totals.session(), 0u) << "what heartbeats report: this generation's traffic";
  totals.Update(30);
  EXPECT_EQ(totals.session(), 30u);
  EXPECT_EQ(totals.total(), 1030u);
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
