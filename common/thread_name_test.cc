#include "common/thread_name.h"

#include <string>
#include <thread>

#include "common/lane_pool.h"
#include "gtest/gtest.h"

namespace tributary {
namespace {

// The name the kernel keeps for a new thread that names itself `name`.
std::string NameKeptFor(const std::string& name) {
  std::string kept;
  std::thread named([&] {
    NameThisThread(name);
    kept = ThisThreadName();
  });
  named.join();
  return kept;
}

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = ThisThreadName();
  EXPECT_EQ(NameKeptFor("push"), "push");
  EXPECT_EQ(ThisThreadName(), before);
}

TEST(ThreadNameTest, CutsALongNameToWhatTheKernelKeeps) {
  const std::string kept = NameKeptFor("a-very-long-thread-name");
  EXPECT_EQ(kept, "a-very-long-thr");
  EXPECT_EQ(kept.size(), kMaxThreadNameBytes);
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
