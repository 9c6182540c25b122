#include "services/coordinator/state_snapshotter.h"

#include <glog/logging.h>

namespace tributary::coordinator {

StateSnapshotter::StateSnapshotter(const std::string& state_dir, absl::Duration interval,
                                   const Clock* clock)
    : interval_(interval),
      clock_(clock),
      file_(state_dir.empty() ? nullptr : std::make_unique<StateFile>(state_dir)) {}

absl::StatusOr<std::optional<StateFile::Loaded>> StateSnapshotter::Load() const {
  if (file_ == nullptr) return std::optional<StateFile::Loaded>();
  return file_->Load();
}

void StateSnapshotter::MarkDirty(bool urgent) {
  ++version_;
  if (urgent) urgent_ = true;
}

bool StateSnapshotter::Due() const {
  if (file_ == nullptr || version_ == snapshot_version_) return false;
  return urgent_ || clock_->Now() - last_save_ >= interval_;
}

absl::Status StateSnapshotter::Save(absl::Mutex& owner_mu,
                                    const std::function<CoordinatorState()>& take) {
  if (file_ == nullptr) return absl::OkStatus();
  absl::MutexLock save_lock(&save_mu_);
  CoordinatorState snapshot;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&owner_mu);
    version = version_;
    if (version <= saved_version_) return absl::OkStatus();
    snapshot = take();
    snapshot_version_ = version;
    urgent_ = false;
    last_save_ = clock_->Now();
  }
  absl::Status saved = file_->Save(snapshot);
  absl::MutexLock lock(&owner_mu);
  if (saved.ok()) {
    saved_version_ = version;
    ++saves_;
  } else {
    ++save_errors_;
    LOG(ERROR) << "cannot save the coordinator state: " << saved;
  }
  return saved;
}

}  // namespace tributary::coordinator
