// The client side of every service-to-service call: one factory so that TLS,
// keepalive and message-size limits are the same everywhere.
#ifndef TRIBUTARY_COMMON_CHANNEL_H_
#define TRIBUTARY_COMMON_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "common/cluster_auth.h"
#include "common/tls.h"

namespace tributary {

struct ChannelOptions {
  TlsFiles tls;
  // Largest message this client accepts (a partition plus framing for PS traffic).
  int64_t max_receive_bytes = 64 << 20;
  // Pings keep idle streams alive through NATs/proxies and find dead peers.
  int keepalive_time_ms = 20000;
  int keepalive_timeout_ms = 10000;
  // Sent as x-tributary-auth on every call when not empty (ClusterAuth::HeaderFor).
  std::string auth_header;
  // Sent as "authorization: Bearer <token>" on every call when not empty (the
  // coordinator's control token; for channels to the coordinator only).
  std::string bearer_token;
  // A TCP connection of this channel's own, not shared with other channels of the
  // process to the same address (gRPC shares by default): for benchmarks and tests
  // whose clients stand in for separate machines.
  bool own_connection = false;
};

// ChannelOptions (no TLS) that send `role`'s credential of `auth`; none when null.
ChannelOptions ChannelOptionsFor(const ClusterAuth* auth, Role role);
// The same with the secret in `token_file` (e.g. a `tributary local` run directory's
// cluster.token); the file's errors as ClusterAuth::FromFile gives them.
absl::StatusOr<ChannelOptions> ChannelOptionsFromTokenFile(const std::string& token_file,
                                                           Role role);

// ChannelOptions with the TLS files of --tls_cert/--tls_key/--tls_ca and, when
// --cluster_token_file is set (and readable), the credential of `role`.
ChannelOptions ChannelOptionsFromFlags(Role role);

// A lazily connecting channel to "host:port". INVALID_ARGUMENT for an empty address;
// TLS file errors are returned as they are.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const ChannelOptions& options);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CHANNEL_H_
