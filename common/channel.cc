#include "common/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"

namespace tributary {

ChannelOptions ChannelOptionsFromFlags() {
  ChannelOptions options;
  options.tls = TlsFilesFromFlags();
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
  return grpc::CreateCustomChannel(address, *credentials, args);
}

}  // namespace tributary
