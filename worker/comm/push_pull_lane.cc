#include "worker/comm/push_pull_lane.h"

#include <sys/socket.h>

namespace tributary::worker {

bool ConnectAbort::BeginCall(grpc::ClientContext* call) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return false;
  call_ = call;
  return true;
}

void ConnectAbort::EndCall() {
  absl::MutexLock lock(&mu_);
  call_ = nullptr;
}

bool ConnectAbort::BeginAdmission(int fd) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return false;
  admitting_fd_ = fd;
  return true;
}

void ConnectAbort::EndAdmission() {
  absl::MutexLock lock(&mu_);
  admitting_fd_ = -1;
}

void ConnectAbort::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  if (call_ != nullptr) call_->TryCancel();
  if (admitting_fd_ >= 0) ::shutdown(admitting_fd_, SHUT_RDWR);
}

bool ConnectAbort::aborted() {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

}  // namespace tributary::worker
