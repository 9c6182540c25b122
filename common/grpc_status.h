// The one place where absl::Status and grpc::Status meet. Business logic returns
// absl::Status; service adaptors convert at the edge with these two functions.
#ifndef TRIBUTARY_COMMON_GRPC_STATUS_H_
#define TRIBUTARY_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tributary {

// Same code (the two enums agree value for value), same message.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// FromGrpcStatus with "<what>: " in front of the message, for calls to other services:
// FromGrpcStatus(s, "PushPull to shard 1 at 10.0.0.3:50061").
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_GRPC_STATUS_H_
