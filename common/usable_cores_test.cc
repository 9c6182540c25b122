#include "common/usable_cores.h"

#include <gtest/gtest.h>

#include <thread>

namespace tributary {
namespace {

TEST(UsableCoresTest, QuotasRoundUpAndNoLimitIsNone) {
  EXPECT_EQ(CoresOfCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CoresOfCpuMax("150000 100000"), 2);  // 1.5 CPUs: two threads, each throttled.
  EXPECT_EQ(CoresOfCpuMax("50000 100000"), 1);
  EXPECT_EQ(CoresOfCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax(""), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax("garbage"), std::nullopt);
  EXPECT_EQ(CoresOfCpuMax("0 100000"), std::nullopt);
  EXPECT_EQ(CoresOfCfsQuota("400000\n", "100000\n"), 4);
  EXPECT_EQ(CoresOfCfsQuota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CoresOfCfsQuota("", ""), std::nullopt);
}

TEST(UsableCoresTest, NeverMoreThanTheMachineNorLessThanOne) {
  const int cores = UsableCores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace tributary
