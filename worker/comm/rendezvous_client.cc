#include "worker/comm/rendezvous_client.h"

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary::worker {
namespace {

class CoordinatorRendezvousClient : public RendezvousClient {
 public:
  CoordinatorRendezvousClient(std::shared_ptr<grpc::Channel> channel, std::string id)
      : stub_(v1::Coordinator::NewStub(std::move(channel))), id_(std::move(id)) {}

  absl::Status Publish(const std::string& key, const std::string& value) override {
    v1::PublishRendezvousRequest request;
    request.set_rendezvous_id(id_);
    request.set_key(key);
    request.set_value(value);
    v1::PublishRendezvousResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return FromGrpcStatus(stub_->PublishRendezvous(&context, request, &response),
                          absl::StrCat("PublishRendezvous(", id_, ", ", key, ")"));
  }

  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Duration timeout) override {
    v1::WaitRendezvousRequest request;
    request.set_rendezvous_id(id_);
    for (const std::string& key : keys) request.add_keys(key);
    request.set_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout)));
    v1::WaitRendezvousResponse response;
    grpc::ClientContext context;
    // The server enforces `timeout`; the RPC deadline only guards against a lost server.
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(timeout + absl::Seconds(10)));
    absl::Status status =
        FromGrpcStatus(stub_->WaitRendezvous(&context, request, &response),
                       absl::StrCat("WaitRendezvous(", id_, ")"));
    if (!status.ok()) return status;
    if (response.values_size() != static_cast<int>(keys.size())) {
      return absl::InternalError(absl::StrCat("WaitRendezvous(", id_, ") answered ",
                                              response.values_size(), " values for ",
                                              keys.size(), " keys"));
    }
    return std::vector<std::string>(response.values().begin(), response.values().end());
  }

  const std::string& rendezvous_id() const override { return id_; }

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const std::string id_;
};

}  // namespace

std::unique_ptr<RendezvousClient> MakeCoordinatorRendezvousClient(
    std::shared_ptr<grpc::Channel> channel, std::string rendezvous_id) {
  return std::make_unique<CoordinatorRendezvousClient>(std::move(channel),
                                                       std::move(rendezvous_id));
}

}  // namespace tributary::worker
