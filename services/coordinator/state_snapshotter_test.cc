#include "services/coordinator/state_snapshotter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace tributary::coordinator {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : "/tmp") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

CoordinatorState State(uint64_t generation) {
  CoordinatorState state;
  state.set_format_version(1);
  state.set_last_generation(generation);
  return state;
}

TEST(StateSnapshotterTest, DisabledWithoutADirectory) {
  FakeClock clock;
  StateSnapshotter snapshotter("", absl::Seconds(5), &clock);
  absl::Mutex mu;
  EXPECT_FALSE(snapshotter.enabled());
  {
    absl::MutexLock lock(&mu);
    snapshotter.MarkDirty(true);
    EXPECT_FALSE(snapshotter.Due());
  }
  bool taken = false;
  EXPECT_TRUE(snapshotter
                  .Save(mu,
                        [&] {
                          taken = true;
                          return State(1);
                        })
                  .ok());
  EXPECT_FALSE(taken);
  EXPECT_FALSE(snapshotter.Load()->has_value());
}

TEST(StateSnapshotterTest, UrgentAtOnceProgressAfterTheInterval) {
  FakeClock clock;
  const std::string dir = TempDir("snapshotter_due");
  StateSnapshotter snapshotter(dir, absl::Seconds(5), &clock);
  absl::Mutex mu;
  uint64_t generation = 0;
  auto take = [&] { return State(++generation); };
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(snapshotter.Due());  // Nothing changed.
    snapshotter.MarkDirty(true);
    EXPECT_TRUE(snapshotter.Due());
  }
  ASSERT_TRUE(snapshotter.Save(mu, take).ok());
  // Nothing new: no second write, nothing taken.
  ASSERT_TRUE(snapshotter.Save(mu, take).ok());
  EXPECT_EQ(generation, 1u);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(snapshotter.saves(), 1u);
    snapshotter.MarkDirty(false);
    EXPECT_FALSE(snapshotter.Due());
  }
  clock.Advance(absl::Seconds(5));
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(snapshotter.Due());
  }
  ASSERT_TRUE(snapshotter.Save(mu, take).ok());
  absl::StatusOr<std::optional<StateFile::Loaded>> loaded = snapshotter.Load();
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->state.last_generation(), 2u);
}

TEST(StateSnapshotterTest, AFailedWriteIsCountedAndRetried) {
  FakeClock clock;
  const std::string dir = TempDir("snapshotter_fail");
  StateSnapshotter snapshotter(dir + "/missing/deeper", absl::Seconds(5), &clock);
  absl::Mutex mu;
  {
    absl::MutexLock lock(&mu);
    snapshotter.MarkDirty(true);
  }
  EXPECT_FALSE(snapshotter.Save(mu, [] { return State(1); }).ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(snapshotter.save_errors(), 1u);
    EXPECT_EQ(snapshotter.saves(), 0u);
  }
  std::filesystem::create_directories(dir + "/missing/deeper");
  // The version is still unsaved: the next Save writes it.
  EXPECT_TRUE(snapshotter.Save(mu, [] { return State(1); }).ok());
}

}  // namespace
}  // namespace tributary::coordinator
