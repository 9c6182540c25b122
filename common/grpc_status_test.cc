#include "common/grpc_status.h"

#include <gtest/gtest.h>

namespace tributary {
namespace {

TEST(GrpcStatusTest, KeepsCodeAndMessageBothWays) {
  const absl::Status original = absl::FailedPreconditionError("stale generation 3, current 4");
  const grpc::Status on_the_wire = ToGrpcStatus(original);
  EXPECT_EQ(on_the_wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(on_the_wire.error_message(), "stale generation 3, current 4");
  EXPECT_EQ(FromGrpcStatus(on_the_wire), original);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCodeMapsToTheSameNumber) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "x");
    EXPECT_EQ(static_cast<int>(ToGrpcStatus(status).error_code()), code);
  }
}

TEST(GrpcStatusTest, PrefixNamesTheCall) {
  const grpc::Status status(grpc::StatusCode::UNAVAILABLE, "connection refused");
  const absl::Status converted = FromGrpcStatus(status, "Pull from shard 1 at 10.0.0.3:50061");
  EXPECT_EQ(converted.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(converted.message(), "Pull from shard 1 at 10.0.0.3:50061: connection refused");
}

}  // namespace
}  // namespace tributary
