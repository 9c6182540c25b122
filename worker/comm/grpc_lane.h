// PushPull over the shard's gRPC PushPull stream, as raw messages
// (common/partition_codec.h): a push goes out from the caller's buffer without a copy.
#ifndef TRIBUTARY_WORKER_COMM_GRPC_LANE_H_
#define TRIBUTARY_WORKER_COMM_GRPC_LANE_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/push_pull_lane.h"

namespace tributary::worker {

class GrpcLane : public PushPullLane {
 public:
  // Starts a PushPull call on `channel`; node_credential (when not empty) goes as
  // x-tributary-node. `name` names the lane in errors ("PS shard 0 at host:port").
  static absl::StatusOr<std::unique_ptr<GrpcLane>> Open(grpc::Channel& channel,
                                                        const std::string& node_credential,
                                                        std::string name);

  bool is_tcp() const override { return false; }
  // The update always comes back in a message: `answer` is not used.
  bool Write(const PushHeader& header, const char* data, size_t bytes,
             AnswerInto answer) override;
  LaneRead Read(ReceivedMessage& received, PartitionValuesView& values,
                absl::Status* status) override;
  void Shutdown() override { context_.TryCancel(); }

 private:
  explicit GrpcLane(std::string name) : name_(std::move(name)) {}

  const std::string name_;
  grpc::ClientContext context_;
  // Declared after the context: destroyed before it.
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_GRPC_LANE_H_
