// A CoordinatorLink that answers from the test's script and records every call, for
// WorkerRuntime's unit tests (worker_runtime_test.cc). Thread-safe: the runtime calls
// it from its heartbeat thread and its main loop.
#ifndef TRIBUTARY_WORKER_TESTING_FAKE_COORDINATOR_LINK_H_
#define TRIBUTARY_WORKER_TESTING_FAKE_COORDINATOR_LINK_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "worker/coordinator_link.h"

namespace tributary::worker::testing {

class FakeCoordinatorLink : public CoordinatorLink {
 public:
  // How registrations are answered: the queued errors first, then OK with worker id
  // "w<n>" (n counts registrations) and a 10 ms heartbeat interval.
  void FailRegistrations(std::vector<absl::Status> errors);
  // How heartbeats are answered (default: ACTION_WAIT). Runs under the fake's lock.
  void OnHeartbeat(
      std::function<absl::StatusOr<v1::HeartbeatResponse>(const v1::HeartbeatRequest&)> answer);

  // Blocks until a heartbeat satisfying `match` arrived (true) or `timeout` passed.
  bool AwaitHeartbeat(const std::function<bool(const v1::HeartbeatRequest&)>& match,
                      absl::Duration timeout);

  int registrations() const;
  std::vector<v1::HeartbeatRequest> heartbeats() const;
  std::vector<v1::DeregisterRequest> deregistrations() const;

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override;
  absl::Status Deregister(const v1::DeregisterRequest& request) override;
  // NOT_FOUND: this fake stores no model files.
  absl::StatusOr<std::shared_ptr<const std::string>> FetchModel(const v1::TorchScriptFile& file,
                                                                absl::Duration timeout) override;
  // Null: multi-process node groups are not faked.
  std::unique_ptr<RendezvousClient> Rendezvous(const std::string& rendezvous_id) override;

 private:
  mutable absl::Mutex mu_;
  std::deque<absl::Status> register_errors_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<absl::StatusOr<v1::HeartbeatResponse>(const v1::HeartbeatRequest&)> answer_
      ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DeregisterRequest> deregistrations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::worker::testing

#endif  // TRIBUTARY_WORKER_TESTING_FAKE_COORDINATOR_LINK_H_
