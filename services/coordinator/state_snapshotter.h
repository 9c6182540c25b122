// What survives a coordinator restart, and when it is written: the jobs, the shard
// map and the last generation number go to --state_dir (state_file.h) at once after a
// state change ("urgent"), and at most every --state_save_interval for progress-only
// changes. Snapshots are taken under the owner's lock and written outside it, in the
// order they were taken. The change counters are guarded by the owner's lock (the
// methods marked so); Save takes it itself.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_STATE_SNAPSHOTTER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_STATE_SNAPSHOTTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "services/coordinator/coordinator_state.pb.h"
#include "services/coordinator/state_file.h"

namespace tributary::coordinator {

class StateSnapshotter {
 public:
  // Empty `state_dir`: nothing is kept (every call is a no-op). `clock` is not owned.
  StateSnapshotter(const std::string& state_dir, absl::Duration interval, const Clock* clock);

  bool enabled() const { return file_ != nullptr; }
  // See StateFile::Load; nullopt also when not enabled.
  absl::StatusOr<std::optional<StateFile::Loaded>> Load() const;

  // --- With the owner's lock held ---
  void MarkDirty(bool urgent);
  // A change is not written yet, and it is urgent or the interval has passed.
  bool Due() const;
  uint64_t saves() const { return saves_; }
  uint64_t save_errors() const { return save_errors_; }

  // --- Without the owner's lock ---
  // Writes the newest state unless it is on disk already. `take` runs under
  // `owner_mu` and returns the state to write.
  absl::Status Save(absl::Mutex& owner_mu, const std::function<CoordinatorState()>& take);

 private:
  const absl::Duration interval_;
  const Clock* clock_;
  const std::unique_ptr<StateFile> file_;
  // Guarded by the owner's lock.
  uint64_t version_ = 0;           // Bumped by every change.
  uint64_t snapshot_version_ = 0;  // Last version handed to a write.
  bool urgent_ = false;
  absl::Time last_save_ = absl::InfinitePast();
  uint64_t saves_ = 0;
  uint64_t save_errors_ = 0;
  // Taken before the owner's lock: snapshots are written in the order they were taken.
  absl::Mutex save_mu_;
  uint64_t saved_version_ ABSL_GUARDED_BY(save_mu_) = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_STATE_SNAPSHOTTER_H_
