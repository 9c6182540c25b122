#include "common/thread_name.h"

#include <string>
#include <thread>

#include "common/lane_pool.h"
#include "gtest/gtest.h"

namespace tributary {
namespace {

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = ThisThreadName();
  std::string inside;
  std::thread named([&] {
    NameThisThread("push");
    inside = ThisThreadName();
  });
  named.join();
  EXPECT_EQ(inside, "push");
  EXPECT_EQ(ThisThreadName(), before);
}

TEST(ThreadNameTest, CutsALongNameToWhatTheKernelKeeps) {
  std::string inside;
  std::thread named([&] {
    NameThisThread("a-very-long-thread-name");
    inside = ThisThreadName();
  });
  named.join();
  EXPECT_EQ(inside, "a-very-long-thr");
  EXPECT_EQ(inside.size(), kMaxThreadNameBytes);
}

TEST(ThreadNameTest, ALanePoolNamesEachLaneByItsIndex) {
  LanePool pool(2, "ps-apply");
  std::string first, second;
  pool.RunEach(3, [&](int i) {
    if (i == 1) first = ThisThreadName();
    if (i == 2) second = ThisThreadName();
  });
  EXPECT_EQ(first, "ps-apply-0");
  EXPECT_EQ(second, "ps-apply-1");
}

}  // namespace
}  // namespace tributary
