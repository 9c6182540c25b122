#include "worker/testing/fake_coordinator_link.h"

#include "absl/strings/str_cat.h"

namespace tributary::worker::testing {

void FakeCoordinatorLink::FailRegistrations(std::vector<absl::Status> errors) {
  absl::MutexLock lock(&mu_);
  register_errors_.assign(errors.begin(), errors.end());
}

void FakeCoordinatorLink::OnHeartbeat(
    std::function<absl::StatusOr<v1::HeartbeatResponse>(const v1::HeartbeatRequest&)> answer) {
  absl::MutexLock lock(&mu_);
  answer_ = std::move(answer);
}

bool FakeCoordinatorLink::AwaitHeartbeat(
    const std::function<bool(const v1::HeartbeatRequest&)>& match, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const v1::HeartbeatRequest& heartbeat : heartbeats_) {
      if (match(heartbeat)) return true;
    }
    return false;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
}

int FakeCoordinatorLink::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

std::vector<v1::HeartbeatRequest> FakeCoordinatorLink::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

std::vector<v1::DeregisterRequest> FakeCoordinatorLink::deregistrations() const {
  absl::MutexLock lock(&mu_);
  return deregistrations_;
}

absl::StatusOr<v1::RegisterWorkerResponse> FakeCoordinatorLink::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  absl::MutexLock lock(&mu_);
  if (!register_errors_.empty()) {
    absl::Status error = register_errors_.front();
    register_errors_.pop_front();
    return error;
  }
  ++registrations_;
  v1::RegisterWorkerResponse response;
  response.set_worker_id(absl::StrCat("w", registrations_));
  response.set_heartbeat_interval_ms(10);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> FakeCoordinatorLink::Heartbeat(
    const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  heartbeats_.push_back(request);
  if (answer_) return answer_(request);
  v1::HeartbeatResponse response;
  response.set_action(v1::ACTION_WAIT);
  return response;
}

absl::Status FakeCoordinatorLink::Deregister(const v1::DeregisterRequest& request) {
  absl::MutexLock lock(&mu_);
  deregistrations_.push_back(request);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> FakeCoordinatorLink::FetchModel(
    const v1::TorchScriptFile& file, absl::Duration timeout) {
  return absl::NotFoundError(absl::StrCat("model file ", file.sha256(), " is not stored"));
}

std::unique_ptr<RendezvousClient> FakeCoordinatorLink::Rendezvous(
    const std::string& rendezvous_id) {
  return nullptr;
}

}  // namespace tributary::worker::testing
