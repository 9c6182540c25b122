#include "common/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tributary {
namespace {

// Adds the credentials (metadata key and value pairs) to every call's initial metadata.
using Credentials = std::vector<std::pair<std::string, std::string>>;

class AuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit AuthInterceptor(const Credentials* credentials) : credentials_(credentials) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      for (const auto& [key, value] : *credentials_) {
        methods->GetSendInitialMetadata()->emplace(key, value);
      }
    }
    methods->Proceed();
  }

 private:
  const Credentials* credentials_;
};

class AuthInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit AuthInterceptorFactory(Credentials credentials)
      : credentials_(std::move(credentials)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new AuthInterceptor(&credentials_);
  }

 private:
  const Credentials credentials_;  // Lives as long as the channel that owns the factory.
};

}  // namespace

ChannelOptions ChannelOptionsFor(const ClusterAuth* auth, Role role) {
  ChannelOptions options;
  if (auth != nullptr) options.auth_header = auth->HeaderFor(role);
  return options;
}

absl::StatusOr<ChannelOptions> ChannelOptionsFromTokenFile(const std::string& token_file,
                                                           Role role) {
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth =
      ClusterAuth::FromFile("cluster_token_file", token_file);
  if (!auth.ok()) return auth.status();
  return ChannelOptionsFor(auth->get(), role);
}

ChannelOptions ChannelOptionsFromFlags(Role role) {
  ChannelOptions options;
  options.tls = TlsFilesFromFlags();
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth = ClusterAuthFromFlags();
  if (auth.ok() && *auth != nullptr) options.auth_header = (*auth)->HeaderFor(role);
  return options;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const ChannelOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("empty service address");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_receive_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(options.max_receive_bytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnect quickly after a peer restarts (local clusters restart in well under 1s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  Credentials sent;
  if (!options.auth_header.empty()) sent.emplace_back(kClusterAuthMetadata, options.auth_header);
  if (!options.bearer_token.empty()) {
    sent.emplace_back("authorization", "Bearer " + options.bearer_token);
  }
  if (sent.empty()) return grpc::CreateCustomChannel(address, *credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<AuthInterceptorFactory>(std::move(sent)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, *credentials, args,
                                                                std::move(interceptors));
}

}  // namespace tributary
