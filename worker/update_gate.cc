#include "worker/update_gate.h"

namespace tributary::worker {

void UpdateGate::Begin() {
  absl::MutexLock lock(&mu_);
  done_ = false;
  applied_until_ = 0;
}

void UpdateGate::Applied(int64_t until) {
  absl::MutexLock lock(&mu_);
  applied_until_ = until;
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

bool UpdateGate::WaitFor(int64_t end) {
  absl::MutexLock lock(&mu_);
  if (ReadyLocked(end)) return false;
  auto ready = [this, end]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ReadyLocked(end); };
  mu_.Await(absl::Condition(&ready));
  return true;
}

absl::Status UpdateGate::WaitDone() {
  absl::MutexLock lock(&mu_);
  auto over = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ || closed_; };
  mu_.Await(absl::Condition(&over));
  return status_;
}

bool UpdateGate::Ready(int64_t end) const {
  absl::MutexLock lock(&mu_);
  return ReadyLocked(end);
}

absl::Status UpdateGate::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace tributary::worker
