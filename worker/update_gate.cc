#include "worker/update_gate.h"

#include <algorithm>
#include <utility>

namespace tributary::worker {

UpdateGate::UpdateGate(std::vector<int64_t> ends) : ends_(std::move(ends)) {
  applied_.assign(ends_.size(), 1);
}

void UpdateGate::Begin() {
  absl::MutexLock lock(&mu_);
  done_ = false;
  std::fill(applied_.begin(), applied_.end(), 0);
}

void UpdateGate::Applied(int index) {
  absl::MutexLock lock(&mu_);
  if (index >= 0 && index < static_cast<int>(applied_.size())) applied_[index] = 1;
}

void UpdateGate::Finish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!status.ok() && status_.ok()) status_ = status;
  done_ = true;
}

void UpdateGate::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool UpdateGate::ReadyLocked(int64_t offset, int64_t end) const {
  if (done_ || closed_ || end <= offset) return true;
  // The first partition ending after `offset`, then on while partitions start before `end`.
  for (size_t i = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), offset) -
                                      ends_.begin());
       i < ends_.size(); ++i) {
    if (!applied_[i]) return false;
    if (ends_[i] >= end) break;
  }
  return true;
}

bool UpdateGate::WaitFor(int64_t offset, int64_t end) {
  absl::MutexLock lock(&mu_);
  if (ReadyLocked(offset, end)) return false;
  auto ready = [this, offset, end]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return ReadyLocked(offset, end);
  };
  mu_.Await(absl::Condition(&ready));
  return true;
}

absl::Status UpdateGate::WaitDone() {
  absl::MutexLock lock(&mu_);
  auto over = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ || closed_; };
  mu_.Await(absl::Condition(&over));
  return status_;
}

bool UpdateGate::Ready(int64_t offset, int64_t end) const {
  absl::MutexLock lock(&mu_);
  return ReadyLocked(offset, end);
}

absl::Status UpdateGate::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace tributary::worker
