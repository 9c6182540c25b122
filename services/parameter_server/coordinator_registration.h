// Announces a shard to the coordinator (Coordinator.RegisterParameterServer) from a
// background thread, retrying with exponential backoff until the coordinator
// answers: the coordinator may start after the shard, or restart.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_COORDINATOR_REGISTRATION_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_COORDINATOR_REGISTRATION_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "proto/coordinator.pb.h"

namespace tributary::ps {

struct RegistrationOptions {
  std::string coordinator;                     // host:port of the coordinator.
  ChannelOptions channel;                      // TLS, limits.
  v1::RegisterParameterServerRequest request;  // address, http_port, shard_index, version.
  absl::Duration first_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(10);
  absl::Duration attempt_timeout = absl::Seconds(5);
};

class CoordinatorRegistration {
 public:
  using Callback = std::function<void(const v1::RegisterParameterServerResponse&)>;

  // Starts registering at once; on_registered runs once, on the registration thread.
  CoordinatorRegistration(RegistrationOptions options, Callback on_registered);
  // Stops retrying and joins the thread.
  ~CoordinatorRegistration();

  CoordinatorRegistration(const CoordinatorRegistration&) = delete;
  CoordinatorRegistration& operator=(const CoordinatorRegistration&) = delete;

  // True once the coordinator accepted the shard (waits up to timeout).
  bool WaitRegistered(absl::Duration timeout);
  int attempts() const;

 private:
  void Run();

  const RegistrationOptions options_;
  const Callback on_registered_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_COORDINATOR_REGISTRATION_H_
