// TcpLane over a socketpair: the shard's end is played by the test, frame by frame,
// so the lane's reading and writing is checked without a shard or gRPC.
#include "worker/comm/tcp_lane.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/data_plane_wire.h"
#include "common/partition_codec.h"
#include "common/shared_region.h"

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;

class TcpLaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    shard_fd_ = fds[1];
    lane_fd_ = fds[0];
  }
  void TearDown() override { ::close(shard_fd_); }

  std::unique_ptr<TcpLane> MakeLane(DirectReceiver* direct = nullptr,
                                    uint64_t max_frame = 1 << 20) {
    return TcpLane::Adopt(lane_fd_, "PS shard 0 at test:1", max_frame, direct);
  }

  // The shard sends partition `id`'s update for `step` as one data-plane frame.
  void SendUpdate(uint32_t id, uint64_t step, const std::vector<float>& data) {
    v1::PartitionValues values;
    values.set_partition_id(id);
    values.set_dtype(v1::FLOAT32);
    values.set_step(step);
    values.set_version(step);
    values.set_data(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
    // As the shard's data plane writes it: every field but the data, then the data.
    std::string bytes = PartitionValuesHead(values) + values.data();
    auto frame = data_plane::EncodeFrameHeader(data_plane::kMessage, bytes.size());
    iovec pieces[2] = {{frame.data(), frame.size()}, {bytes.data(), bytes.size()}};
    ASSERT_TRUE(data_plane::WriteAll(shard_fd_, pieces, 2, "test update").ok());
  }

  // Plays the shard's side of a region offer on another thread: maps what the lane
  // hands over into *mapped and answers OK.
  std::thread AcceptRegion(SharedRegion* mapped) {
    return std::thread([this, mapped] {
      char bytes[data_plane::kFrameHeaderBytes];
      int passed = -1;
      ASSERT_TRUE(ReadWithDescriptor(shard_fd_, bytes, sizeof(bytes), &passed, "offer").ok());
      absl::StatusOr<data_plane::FrameHeader> frame = data_plane::ParseFrameHeader(bytes, 0, "t");
      ASSERT_TRUE(frame.ok()) << frame.status();
      ASSERT_EQ(frame->kind, data_plane::kRegion);
      char size[data_plane::kRegionPayloadBytes];
      ASSERT_TRUE(data_plane::ReadFull(shard_fd_, size, sizeof(size), "offer").ok());
      absl::StatusOr<SharedRegion> region =
          SharedRegion::Map(passed, data_plane::ParseRegionSize(size), 1 << 20);
      ASSERT_TRUE(region.ok()) << region.status();
      *mapped = *std::move(region);
      ASSERT_TRUE(data_plane::WriteStatusFrame(shard_fd_, absl::OkStatus()).ok());
    });
  }

  // The next frame the lane wrote, its kind and payload.
  std::pair<uint32_t, std::string> ReadFrame() {
    absl::StatusOr<data_plane::FrameHeader> frame =
        data_plane::ReadFrameHeader(shard_fd_, 1 << 20, "test");
    EXPECT_TRUE(frame.ok()) << frame.status();
    if (!frame.ok()) return {0, ""};
    std::string payload(frame->length, '\0');
    EXPECT_TRUE(data_plane::ReadFull(shard_fd_, payload.data(), payload.size(), "test").ok());
    return {frame->kind, std::move(payload)};
  }

  // The shard announces partition `id`'s update for step 4, whose `data` it wrote into
  // its region at `offset`, in a shared frame.
  void SendShared(uint32_t id, uint64_t offset, const std::vector<float>& data) {
    v1::PartitionValues values;
    values.set_partition_id(id);
    values.set_dtype(v1::FLOAT32);
    values.set_step(4);
    values.set_version(4);
    values.set_data(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
    const std::string head = PartitionValuesHead(values);
    data_plane::SharedPlace at;
    at.offset = offset;
    at.size = data.size() * sizeof(float);
    auto prefix = data_plane::EncodeSharedPlace(at);
    auto frame = data_plane::EncodeFrameHeader(data_plane::kShared, prefix.size() + head.size());
    iovec pieces[3] = {{frame.data(), frame.size()},
                       {prefix.data(), prefix.size()},
                       {const_cast<char*>(head.data()), head.size()}};
    ASSERT_TRUE(data_plane::WriteAll(shard_fd_, pieces, 3, "test").ok());
  }

  int shard_fd_ = -1;
  int lane_fd_ = -1;
};

// A shared push frame's payload decoded, its data read where it places them in `region`.
struct SharedPush {
  data_plane::SharedPlace place;
  uint64_t step = 0;
  uint64_t samples = 0;
  std::vector<float> data;
};
SharedPush DecodeSharedPush(const std::string& payload, const SharedRegion& region) {
  SharedPush decoded;
  decoded.place = data_plane::ParseSharedPlace(payload.data());
  ReceivedMessage received;
  GradientPushView push;
  const absl::Status status = DecodeGradientPush(
      absl::string_view(payload).substr(data_plane::kSharedPrefixBytes),
      absl::string_view(region.data() + decoded.place.offset, decoded.place.size), &received,
      &push);
  EXPECT_TRUE(status.ok()) << status;
  if (!status.ok()) return decoded;
  decoded.step = push.step;
  decoded.samples = push.sample_count;
  decoded.data.resize(push.data.size / sizeof(float));
  CopyFloatsInto(push.data, decoded.data.data());
  return decoded;
}

// A push of partition `id` for step 3 of 8 samples.
PushHeader HeaderFor(uint32_t id) {
  PushHeader header;
  header.job_id = "job-1";
  header.step = 3;
  header.partition_id = id;
  header.dtype = v1::FLOAT32;
  header.sample_count = 8;
  header.steps = 1;
  return header;
}

TEST_F(TcpLaneTest, WritesAPushAsOneFrameTheShardDecodes) {
  auto lane = MakeLane();
  std::vector<float> grad = {1.5f, -2.0f, 3.25f};
  PushHeader header;
  header.job_id = "job-1";
  header.generation = 4;
  header.step = 7;
  header.partition_id = 2;
  header.dtype = v1::FLOAT32;
  header.sample_count = 64;
  header.steps = 1;
  ASSERT_TRUE(lane->Write(header, reinterpret_cast<const char*>(grad.data()),
                          grad.size() * sizeof(float), {}));
  absl::StatusOr<data_plane::FrameHeader> frame =
      data_plane::ReadFrameHeader(shard_fd_, 1 << 20, "test");
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->kind, data_plane::kMessage);
  std::vector<char> bytes(frame->length);
  ASSERT_TRUE(data_plane::ReadFull(shard_fd_, bytes.data(), bytes.size(), "test").ok());
  ReceivedMessage received;
  GradientPushView push;
  ASSERT_TRUE(DecodeGradientPush(absl::string_view(bytes.data(), bytes.size()), &received, &push)
                  .ok());
  EXPECT_EQ(push.job_id, "job-1");
  EXPECT_EQ(push.generation, 4u);
  EXPECT_EQ(push.step, 7u);
  EXPECT_EQ(push.partition_id, 2u);
  EXPECT_EQ(push.sample_count, 64u);
  std::vector<float> got(3);
  CopyFloatsInto(push.data, got.data());
  EXPECT_EQ(got, grad);
}

TEST_F(TcpLaneTest, ReadsAnUpdateAsAMessageThenTheShardsEndingStatus) {
  auto lane = MakeLane();
  SendUpdate(1, 5, {0.5f, 0.25f});
  ASSERT_TRUE(data_plane::WriteStatusFrame(
                  shard_fd_, absl::FailedPreconditionError("stale generation 3"))
                  .ok());
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kMessage);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(values.partition_id, 1u);
  EXPECT_EQ(values.step, 5u);
  std::vector<float> got(2);
  CopyFloatsInto(values.data, got.data());
  EXPECT_EQ(got, (std::vector<float>{0.5f, 0.25f}));
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kEnded);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("PS shard 0 at test:1"));
  EXPECT_THAT(status.message(), HasSubstr("stale generation 3"));
}

// Claims partition 0's update into `into`, and records what landed.
class OneDestination : public DirectReceiver {
 public:
  explicit OneDestination(float* into) : into_(into) {}
  float* Claim(PushPullLane&, const PartitionValuesView& head, uint64_t data_bytes) override {
    claimed_bytes = data_bytes;
    return head.partition_id == 0 ? into_ : nullptr;
  }
  void Landed(const PartitionValuesView& head, uint64_t, const absl::Status& read,
              bool in_place) override {
    landed_in_place = in_place;
    landed_step = head.step;
    landed = read;
  }
  uint64_t claimed_bytes = 0;
  uint64_t landed_step = 0;
  bool landed_in_place = false;
  absl::Status landed = absl::UnknownError("not landed");

 private:
  float* into_;
};

TEST_F(TcpLaneTest, AClaimedUpdateLandsInPlaceAndOthersStayMessages) {
  std::vector<float> params(3, 0.0f);
  OneDestination direct(params.data());
  auto lane = MakeLane(&direct);
  SendUpdate(0, 9, {1.0f, 2.0f, 3.0f});
  SendUpdate(1, 9, {4.0f});
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kLanded);
  EXPECT_EQ(params, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(direct.claimed_bytes, 12u);
  EXPECT_EQ(direct.landed_step, 9u);
  EXPECT_TRUE(direct.landed.ok()) << direct.landed;
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kMessage);
  EXPECT_EQ(values.partition_id, 1u);
}

TEST_F(TcpLaneTest, AFrameOverTheLimitIsTheShardsFaultAndNotRetried) {
  auto lane = MakeLane(nullptr, /*max_frame=*/16);
  SendUpdate(0, 1, std::vector<float>(100, 1.0f));
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kEnded);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_F(TcpLaneTest, ShutdownEndsABlockedReadAsUnavailable) {
  auto lane = MakeLane();
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    lane->Shutdown();
  });
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  EXPECT_EQ(lane->Read(received, values, &status), LaneRead::kEnded);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  stopper.join();
  // A write on a shut lane fails instead of blocking.
  PushHeader header;
  header.job_id = "job-1";
  float one = 1.0f;
  EXPECT_FALSE(lane->Write(header, reinterpret_cast<const char*>(&one), sizeof(one), {}));
}

// The lane's side of the shared region: it offers a sealed region laid out as push and
// update slots per partition, pushes into the slots (the socket carrying the heads),
// and reads an update from where the shard wrote it, straight into a claimed
// destination or as a message of its own (the slot stays the shard's).
TEST_F(TcpLaneTest, ASharedRegionCarriesPushesAndUpdates) {
  std::vector<std::pair<uint32_t, uint64_t>> partitions = {{0, 12}, {2, 40}};
  SharedRegion shard_side;
  std::thread shard = AcceptRegion(&shard_side);
  absl::StatusOr<std::pair<SharedRegion, std::vector<TcpLane::SharedSlot>>> offered =
      TcpLane::OfferShared(lane_fd_, partitions, absl::Seconds(20));
  shard.join();
  ASSERT_TRUE(offered.ok()) << offered.status();
  const std::vector<TcpLane::SharedSlot> slots = offered->second;
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_FALSE(slots[1].present);
  EXPECT_EQ(shard_side.size(), 64u + 64u + 64u + 64u) << "each slot on a cache line";
  std::vector<float> params(3, 0.0f);
  OneDestination direct(params.data());
  auto lane = TcpLane::AdoptShared(lane_fd_, "PS shard 0 at test:1", 1 << 20, &direct,
                                   std::make_shared<SharedRegion>(std::move(offered->first)),
                                   slots);
  EXPECT_TRUE(lane->is_shared());

  // A push: the data in partition 2's push slot, a shared frame naming it and the
  // update slot.
  std::vector<float> grad(10);
  for (int i = 0; i < 10; ++i) grad[i] = 0.5f * static_cast<float>(i) - 1.0f;
  ASSERT_TRUE(lane->Write(HeaderFor(2), reinterpret_cast<const char*>(grad.data()), 40, {}));
  const auto [kind, payload] = ReadFrame();
  ASSERT_EQ(kind, data_plane::kShared);
  const SharedPush push = DecodeSharedPush(payload, shard_side);
  EXPECT_EQ(push.place.offset, slots[2].push_offset);
  EXPECT_EQ(push.place.size, 40u);
  EXPECT_EQ(push.place.answer_offset, slots[2].values_offset);
  EXPECT_EQ(push.place.answer_capacity, 40u);
  EXPECT_EQ(push.step, 3u);
  EXPECT_EQ(push.samples, 8u);
  EXPECT_EQ(push.data, grad);

  // Updates written into the slots: partition 0's is claimed and lands in params,
  // partition 2's is read as a message.
  auto send_shared = [&](uint32_t id, uint64_t offset, const std::vector<float>& data) {
    std::memcpy(shard_side.data() + offset, data.data(), data.size() * sizeof(float));
    SendShared(id, offset, data);
  };
  send_shared(0, slots[0].values_offset, {7.0f, 8.0f, 9.0f});
  std::vector<float> update(10, 0.25f);
  send_shared(2, slots[2].values_offset, update);
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kLanded);
  EXPECT_EQ(params, (std::vector<float>{7.0f, 8.0f, 9.0f}));
  EXPECT_TRUE(direct.landed.ok()) << direct.landed;
  EXPECT_EQ(direct.landed_step, 4u);
  EXPECT_FALSE(direct.landed_in_place) << "copied out of its slot";
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kMessage);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(values.partition_id, 2u);
  // The shard may write the slot again: the message keeps what arrived.
  std::memset(shard_side.data() + slots[2].values_offset, 0, 40);
  std::vector<float> got(10);
  CopyFloatsInto(values.data, got.data());
  EXPECT_EQ(got, update);

  // An update the shard places outside the region ends the lane as its fault.
  data_plane::SharedPlace outside;
  outside.offset = shard_side.size() - 4;
  outside.size = 12;
  auto prefix = data_plane::EncodeSharedPlace(outside);
  auto bad = data_plane::EncodeFrameHeader(data_plane::kShared, prefix.size());
  iovec pieces[2] = {{bad.data(), bad.size()}, {prefix.data(), prefix.size()}};
  ASSERT_TRUE(data_plane::WriteAll(shard_fd_, pieces, 2, "test").ok());
  ASSERT_EQ(lane->Read(received, values, &status), LaneRead::kEnded);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("outside the region"));
}

// The node's region (the worker's parameters and gradients themselves, shared with
// every local shard): its descriptor stays open for the next shard; a push whose data
// lies in it is a frame naming that place (nothing copied), with its update expected
// at the parameters' place; an update the shard wrote there lands in place. Data or an
// expected place outside the region, with no slots to copy through, go inline.
TEST_F(TcpLaneTest, ANodeRegionCarriesPushesFromWhereTheyLieAndUpdatesIntoPlace) {
  constexpr size_t kGradientsAt = 64;
  absl::StatusOr<SharedRegion> made = SharedRegion::Create(128);
  ASSERT_TRUE(made.ok()) << made.status();
  auto node = std::make_shared<SharedRegion>(*std::move(made));
  float* params = reinterpret_cast<float*>(node->data());
  float* grads = reinterpret_cast<float*>(node->data() + kGradientsAt);
  SharedRegion shard_side;
  std::thread shard = AcceptRegion(&shard_side);
  ASSERT_TRUE(TcpLane::OfferRegion(lane_fd_, *node, absl::Seconds(20)).ok());
  shard.join();
  ASSERT_EQ(shard_side.size(), 128u);
  EXPECT_GE(::fcntl(node->fd(), F_GETFD), 0) << "the descriptor stays open for the next shard";
  OneDestination direct(params);
  auto lane = TcpLane::AdoptShared(lane_fd_, "PS shard 0 at test:1", 1 << 20, &direct, node, {});
  EXPECT_TRUE(lane->is_shared());

  for (int i = 0; i < 3; ++i) grads[i] = 1.5f + static_cast<float>(i);
  const PushHeader header = HeaderFor(0);
  ASSERT_TRUE(lane->Write(header, reinterpret_cast<const char*>(grads), 12, {params, 12}));
  auto [kind, payload] = ReadFrame();
  ASSERT_EQ(kind, data_plane::kShared);
  const SharedPush push = DecodeSharedPush(payload, shard_side);
  EXPECT_EQ(push.place.offset, kGradientsAt) << "sent from where the gradients lie";
  EXPECT_EQ(push.place.size, 12u);
  EXPECT_EQ(push.place.answer_offset, 0u) << "the update is expected at the parameters";
  EXPECT_EQ(push.place.answer_capacity, 12u);
  EXPECT_EQ(push.data, (std::vector<float>{1.5f, 2.5f, 3.5f}));

  // Expected somewhere the region does not hold: the shard is asked for no place.
  std::vector<float> elsewhere(3);
  ASSERT_TRUE(lane->Write(header, reinterpret_cast<const char*>(grads), 12,
                          {elsewhere.data(), 12}));
  std::tie(kind, payload) = ReadFrame();
  ASSERT_EQ(kind, data_plane::kShared);
  const data_plane::SharedPlace place = data_plane::ParseSharedPlace(payload.data());
  EXPECT_EQ(place.answer_offset, 0u);
  EXPECT_EQ(place.answer_capacity, 0u);

  // Data outside the region, and no slot to copy it into: inline.
  const std::vector<float> heap = {4.0f, 5.0f, 6.0f};
  ASSERT_TRUE(lane->Write(header, reinterpret_cast<const char*>(heap.data()), 12, {params, 12}));
  EXPECT_EQ(ReadFrame().first, data_plane::kMessage);

  // The shard writes the update at the parameters' place and says so: it lands in place.
  const std::vector<float> update = {7.0f, 8.0f, 9.0f};
  std::memcpy(shard_side.data(), update.data(), 12);
  SendShared(0, 0, update);
  ReceivedMessage received;
  PartitionValuesView view;
  absl::Status status;
  ASSERT_EQ(lane->Read(received, view, &status), LaneRead::kLanded);
  EXPECT_TRUE(direct.landed.ok()) << direct.landed;
  EXPECT_TRUE(direct.landed_in_place);
  EXPECT_EQ(std::vector<float>(params, params + 3), update);
}

TEST_F(TcpLaneTest, ARefusedRegionIsSaidSoAndTheConnectionStaysUsable) {
  std::thread shard([&] {
    char bytes[data_plane::kFrameHeaderBytes + 8];
    int passed = -1;
    ASSERT_TRUE(ReadWithDescriptor(shard_fd_, bytes, sizeof(bytes), &passed, "offer").ok());
    ASSERT_GE(passed, 0);
    ::close(passed);
    ASSERT_TRUE(data_plane::WriteStatusFrame(
                    shard_fd_, absl::InvalidArgumentError("shared region: over the limit"))
                    .ok());
  });
  absl::StatusOr<std::pair<SharedRegion, std::vector<TcpLane::SharedSlot>>> offered =
      TcpLane::OfferShared(lane_fd_, {{0, 400}}, absl::Seconds(20));
  shard.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(offered.status())) << offered.status();
  EXPECT_THAT(offered.status().message(), HasSubstr("over the limit"));
  auto lane = MakeLane();
  SendUpdate(1, 5, {0.5f});
  ReceivedMessage received;
  PartitionValuesView values;
  absl::Status status;
  EXPECT_EQ(lane->Read(received, values, &status), LaneRead::kMessage);
}

TEST(ConnectAbortTest, AbortFailsEveryLaterBeginAndShutsTheAdmittingSocket) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ConnectAbort abort;
  ASSERT_TRUE(abort.BeginAdmission(fds[0]));
  abort.Abort();
  char byte;
  EXPECT_EQ(::recv(fds[0], &byte, 1, 0), 0);  // Shut down: reads end at once.
  abort.EndAdmission();
  EXPECT_TRUE(abort.aborted());
  EXPECT_FALSE(abort.BeginAdmission(fds[0]));
  grpc::ClientContext context;
  EXPECT_FALSE(abort.BeginCall(&context));
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace tributary::worker
