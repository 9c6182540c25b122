#include "services/parameter_server/coordinator_registration.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "common/backoff.h"
#include "common/grpc_status.h"
#include "common/thread_name.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary::ps {

CoordinatorRegistration::CoordinatorRegistration(RegistrationOptions options,
                                                 Callback on_registered)
    : options_(std::move(options)), on_registered_(std::move(on_registered)) {
  thread_ = std::thread([this] {
    NameThisThread("ps-register");
    Run();
  });
}

CoordinatorRegistration::~CoordinatorRegistration() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

bool CoordinatorRegistration::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&registered_), timeout);
  return registered_;
}

int CoordinatorRegistration::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

void CoordinatorRegistration::Run() {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options_.coordinator, options_.channel);
  if (!channel.ok()) {
    LOG(ERROR) << "cannot register with the coordinator at " << options_.coordinator << ": "
               << channel.status();
    return;
  }
  auto stub = v1::Coordinator::NewStub(*channel);
  Backoff backoff(options_.first_backoff, options_.max_backoff);
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(options_.attempt_timeout));
    v1::RegisterParameterServerResponse response;
    const grpc::Status status =
        stub->RegisterParameterServer(&context, options_.request, &response);
    int attempt;
    {
      absl::MutexLock lock(&mu_);
      attempt = ++attempts_;
    }
    if (status.ok()) {
      LOG(INFO) << "registered with the coordinator at " << options_.coordinator << " as shard "
                << response.shard_index() << " of " << response.expected_shards() << " (address "
                << options_.request.address() << ", attempt " << attempt << ")";
      on_registered_(response);
      absl::MutexLock lock(&mu_);
      registered_ = true;
      return;
    }
    // Log the first failures and then every tenth, so a long outage does not flood.
    if (attempt <= 3 || attempt % 10 == 0) {
      LOG(WARNING) << "registering with the coordinator at " << options_.coordinator
                   << " failed (attempt " << attempt
                   << "): " << FromGrpcStatus(status, "RegisterParameterServer") << "; retrying in "
                   << backoff.Peek();
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff.Next())) return;
  }
}

}  // namespace tributary::ps
