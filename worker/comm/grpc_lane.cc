#include "worker/comm/grpc_lane.h"

#include <grpcpp/impl/rpc_method.h>

#include "absl/strings/str_cat.h"
#include "common/cluster_auth.h"
#include "common/grpc_status.h"

namespace tributary::worker {
namespace {

// PushPull as a raw-message call: the generated stub would serialize protobufs, and
// gRPC's public generic stub has no blocking bidi stream, so the stream is made the
// way the generated stub makes it, with grpc::ByteBuffer for both message types.
constexpr char kPushPullMethod[] = "/tributary.v1.ParameterServer/PushPull";

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcLane>> GrpcLane::Open(grpc::Channel& channel,
                                                         const std::string& node_credential,
                                                         std::string name) {
  std::unique_ptr<GrpcLane> lane(new GrpcLane(std::move(name)));
  if (!node_credential.empty()) {
    lane->context_.AddMetadata(kNodeCredentialMetadata, node_credential);
  }
  lane->stream_.reset(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          &channel,
          grpc::internal::RpcMethod(kPushPullMethod, grpc::internal::RpcMethod::BIDI_STREAMING),
          &lane->context_));
  if (lane->stream_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("PushPull to ", lane->name_, ": no stream"));
  }
  return lane;
}

bool GrpcLane::Write(const PushHeader& header, const char* data, size_t bytes, AnswerInto) {
  grpc::ByteBuffer message = EncodeGradientPush(header, data, bytes);
  // Written through: the message points into the caller's buffer (see
  // EncodeGradientPush).
  return stream_->Write(message, grpc::WriteOptions().set_write_through());
}

LaneRead GrpcLane::Read(ReceivedMessage& received, PartitionValuesView& values,
                        absl::Status* status) {
  grpc::ByteBuffer message;
  if (stream_->Read(&message)) {
    *status = DecodePartitionValues(message, &received, &values);
    return LaneRead::kMessage;
  }
  *status = FromGrpcStatus(stream_->Finish(), absl::StrCat("PushPull to ", name_));
  return LaneRead::kEnded;
}

}  // namespace tributary::worker
