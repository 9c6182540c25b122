#include "services/parameter_server/step_census.h"

#include <gtest/gtest.h>

namespace tributary::ps {
namespace {

TEST(StepCensusTest, TracksTheLowestStepAsPartitionsMove) {
  StepCensus census;
  EXPECT_TRUE(census.empty());
  EXPECT_EQ(census.lowest(), 0u);
  for (int i = 0; i < 3; ++i) census.Add(5);
  EXPECT_EQ(census.lowest(), 5u);
  EXPECT_EQ(census.at(5), 3u);
  census.Move(5, 6);
  census.Move(5, 6);
  EXPECT_EQ(census.lowest(), 5u) << "one partition still at step 5";
  census.Move(6, 7);  // Partitions complete out of order.
  census.Move(5, 6);
  EXPECT_EQ(census.lowest(), 6u);
  EXPECT_EQ(census.at(5), 0u);
  EXPECT_EQ(census.at(6), 2u);
  EXPECT_EQ(census.at(7), 1u);
  census.Move(7, 3);  // A rollback moves a partition down.
  EXPECT_EQ(census.lowest(), 3u);
  census.Move(42, 8);  // A step nobody is at only adds.
  EXPECT_EQ(census.at(8), 1u);
  census.Clear();
  EXPECT_TRUE(census.empty());
}

TEST(StepCensusTest, ManyStepsStaySorted) {
  StepCensus census;
  for (uint64_t step = 200; step > 0; --step) census.Add(step);
  EXPECT_EQ(census.lowest(), 1u);
  for (uint64_t step = 1; step <= 199; ++step) census.Move(step, 200);
  EXPECT_EQ(census.lowest(), 200u);
  EXPECT_EQ(census.at(200), 200u);
}

}  // namespace
}  // namespace tributary::ps
