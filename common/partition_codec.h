// The PushPull hot path's two messages without protobuf copies, shared by the worker
// and the PS shard. GradientPush and PartitionValues keep protobuf's own wire format
// (any protobuf client, grpcurl included, still calls the same method), but are
// written as a small hand-encoded header slice plus one slice over the values where
// they lie, and read as views over the slices gRPC received them in: the values are
// never copied into or out of a protobuf string (TensorFlow's grpc_tensor_coding).
//
//   grpc::ByteBuffer wire = EncodeGradientPush(header, grad_bytes, size);  // no copy
//   ReceivedMessage received;                      // on the other side
//   GradientPushView push;
//   DecodeGradientPush(buffer, &received, &push);  // push.data points into `received`
#ifndef TRIBUTARY_COMMON_PARTITION_CODEC_H_
#define TRIBUTARY_COMMON_PARTITION_CODEC_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/wire_dtype.h"
#include "proto/parameter_server.pb.h"

namespace tributary {

// Every field of a GradientPush but its data (parameter_server.proto).
struct PushHeader {
  std::string job_id;
  uint64_t generation = 0;
  uint64_t step = 0;
  uint32_t node_rank = 0;
  uint32_t partition_id = 0;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  uint64_t sample_count = 0;
  uint32_t steps = 0;
};

// A GradientPush as the shard reads it: the header fields and the data where it lies.
struct GradientPushView : PushHeader {
  ByteSpans data;
};

// A PartitionValues as the worker reads it.
struct PartitionValuesView {
  uint32_t partition_id = 0;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  uint64_t version = 0;
  uint64_t step = 0;
  ByteSpans data;
};

// The slices of one received message, kept alive while a view points into them.
// Reused from message to message (its vector keeps its capacity).
// (A message read from the TCP data plane lies in `bytes`, the receiver's buffer.)
struct ReceivedMessage {
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> pieces;  // The message's bytes, in order.
  std::vector<char> bytes;
};

// The push as protobuf wire bytes: a header slice and a slice over data[0, size),
// which is not copied: it must stay alive and unchanged until gRPC no longer holds
// it. Write it with grpc::WriteOptions().set_write_through(): that write completes
// only once the transport has handed the bytes to the socket (without it, a write
// completes when its bytes pass flow control, and the transport may still send from
// the memory after the caller freed it, as when a job ends while a write waits).
grpc::ByteBuffer EncodeGradientPush(const PushHeader& header, const char* data, size_t size);

// The values as protobuf wire bytes: a header slice and a slice over values->data(),
// which holds a reference to `values` until gRPC is done with it.
grpc::ByteBuffer EncodePartitionValues(std::shared_ptr<const v1::PartitionValues> values);

// Reads a GradientPush (any valid protobuf encoding: fields in any order, repeated or
// unknown fields, as protobuf reads them) from `buffer`; `received` keeps its slices.
// INVALID_ARGUMENT naming the offset for bytes that are not a GradientPush.
absl::Status DecodeGradientPush(const grpc::ByteBuffer& buffer, ReceivedMessage* received,
                                GradientPushView* push);
absl::Status DecodePartitionValues(const grpc::ByteBuffer& buffer, ReceivedMessage* received,
                                   PartitionValuesView* values);

// The same over one contiguous message (the TCP data plane's frames: the bytes must
// outlive the view; `received` only keeps the piece list).
absl::Status DecodeGradientPush(absl::string_view bytes, ReceivedMessage* received,
                                GradientPushView* push);
absl::Status DecodePartitionValues(absl::string_view bytes, ReceivedMessage* received,
                                   PartitionValuesView* values);

// The same over a message in two pieces, its head and its data where it lies (the
// local lane's shared region, common/shared_region.h): head + data must be the message.
absl::Status DecodeGradientPush(absl::string_view head, absl::string_view data,
                                ReceivedMessage* received, GradientPushView* push);
absl::Status DecodePartitionValues(absl::string_view head, absl::string_view data,
                                   ReceivedMessage* received, PartitionValuesView* values);

// The fields of a PartitionValues from the first bytes of it (`prefix`, of a message
// of message_size bytes) when they are laid out as PartitionValuesHead writes them:
// varint fields 1, 2, 4 and 5 in any order, then the data field last, its tag and
// length inside the prefix and running to the message's end. Fills values (its data
// left empty) and *data_offset; false for any other layout (decode the whole message
// then). Lets the worker receive the data of an update straight into its parameters.
bool ParseValuesHead(absl::string_view prefix, uint64_t message_size, PartitionValuesView* values,
                     size_t* data_offset);

// The protobuf wire bytes of every field but the data, followed by the data field's
// tag and length when data_size > 0: head + data is the message (the TCP data plane
// sends the two with one writev).
std::string GradientPushHead(const PushHeader& header, size_t data_size);
std::string PartitionValuesHead(const v1::PartitionValues& values);

// A view of a protobuf GradientPush, whose data it points into (for tests and
// in-process callers; `push` must outlive the view).
GradientPushView ViewOf(const v1::GradientPush& push);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PARTITION_CODEC_H_
