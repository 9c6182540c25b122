#include "common/partition_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tributary {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// The same bytes cut into pieces at the given offsets (as gRPC may receive them).
grpc::ByteBuffer Cut(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t from = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    if (cut <= from || cut > bytes.size()) continue;
    slices.emplace_back(bytes.data() + from, cut - from);
    from = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const ByteSpans& spans) {
  std::string bytes;
  for (absl::string_view piece : spans.pieces) bytes.append(piece.data(), piece.size());
  EXPECT_EQ(bytes.size(), spans.size);
  return bytes;
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = scale * static_cast<float>(i) - 3.5f;
  return values;
}

PushHeader SomeHeader() {
  PushHeader header;
  header.job_id = "job-7-a1b2";
  header.generation = 3;
  header.step = (uint64_t{1} << 40) + 17;
  header.node_rank = 65535;
  header.partition_id = 12;
  header.dtype = v1::FLOAT32;
  header.sample_count = 64;
  header.steps = 4;
  return header;
}

TEST(PartitionCodecTest, EncodedPushIsTheProtobufMessageAndTheDataIsNotCopied) {
  const std::vector<float> grad = Ramp(1000, 0.25f);
  const PushHeader header = SomeHeader();
  grpc::ByteBuffer wire =
      EncodeGradientPush(header, reinterpret_cast<const char*>(grad.data()), grad.size() * 4);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(wire.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  // The second slice is the caller's memory itself.
  EXPECT_EQ(reinterpret_cast<const void*>(slices[1].begin()),
            reinterpret_cast<const void*>(grad.data()));

  v1::GradientPush parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(wire)));
  EXPECT_EQ(parsed.job_id(), header.job_id);
  EXPECT_EQ(parsed.generation(), header.generation);
  EXPECT_EQ(parsed.step(), header.step);
  EXPECT_EQ(parsed.node_rank(), header.node_rank);
  EXPECT_EQ(parsed.partition_id(), header.partition_id);
  EXPECT_EQ(parsed.dtype(), header.dtype);
  EXPECT_EQ(parsed.sample_count(), header.sample_count);
  EXPECT_EQ(parsed.steps(), header.steps);
  EXPECT_EQ(parsed.data(), std::string(reinterpret_cast<const char*>(grad.data()), 4000));
}

TEST(PartitionCodecTest, DecodesProtobufsEncodingCutAnywhere) {
  v1::GradientPush push;
  push.set_job_id("job-1-ffff");
  push.set_generation(9);
  push.set_step(123456789);
  push.set_node_rank(2);
  push.set_partition_id(40);
  push.set_dtype(v1::BFLOAT16);
  push.set_sample_count(uint64_t{1} << 40);
  push.set_steps(8);
  std::string data(1026, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  push.set_data(data);
  const std::string bytes = push.SerializeAsString();

  std::mt19937 random(5);
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> cuts;
    const int pieces = round % 6;
    for (int c = 0; c < pieces; ++c) cuts.push_back(random() % bytes.size());
    std::sort(cuts.begin(), cuts.end());
    ReceivedMessage received;
    GradientPushView view;
    ASSERT_TRUE(DecodeGradientPush(Cut(bytes, cuts), &received, &view).ok());
    EXPECT_EQ(view.job_id, push.job_id());
    EXPECT_EQ(view.generation, push.generation());
    EXPECT_EQ(view.step, push.step());
    EXPECT_EQ(view.node_rank, push.node_rank());
    EXPECT_EQ(view.partition_id, push.partition_id());
    EXPECT_EQ(view.dtype, push.dtype());
    EXPECT_EQ(view.sample_count, push.sample_count());
    EXPECT_EQ(view.steps, push.steps());
    EXPECT_EQ(Joined(view.data), data);
  }
}

TEST(PartitionCodecTest, ReadsAsProtobufDoesUnknownRepeatedAndMistypedFields) {
  // Fields in reverse order, an unknown field of every wire type, a repeated scalar
  // (the last wins) and a known field with the wrong wire type (skipped as unknown).
  std::string bytes;
  auto varint = [&](uint64_t v) {
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
  };
  varint((7u << 3) | 2);
  varint(8);
  bytes.append("abcdefgh");
  varint((3u << 3) | 0);
  varint(5);
  varint((3u << 3) | 0);
  varint(6);            // step: the last value counts.
  varint((99u << 3) | 1);
  bytes.append(8, 'x');  // Unknown fixed64.
  varint((98u << 3) | 5);
  bytes.append(4, 'y');  // Unknown fixed32.
  varint((97u << 3) | 2);
  varint(3);
  bytes.append("zzz");  // Unknown bytes.
  varint((2u << 3) | 2);
  varint(1);
  bytes.append("q");    // generation sent as bytes: unknown to protobuf too.
  varint((1u << 3) | 2);
  varint(5);
  bytes.append("job-2");

  v1::GradientPush reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  ReceivedMessage received;
  GradientPushView view;
  ASSERT_TRUE(DecodeGradientPush(Cut(bytes, {3, 11}), &received, &view).ok());
  EXPECT_EQ(view.job_id, reference.job_id());
  EXPECT_EQ(view.step, reference.step());
  EXPECT_EQ(view.step, 6u);
  EXPECT_EQ(view.generation, reference.generation());
  EXPECT_EQ(Joined(view.data), reference.data());
}

TEST(PartitionCodecTest, RefusesFieldZeroWhereProtobufStopsReading) {
  ReceivedMessage received;
  GradientPushView view;
  EXPECT_EQ(DecodeGradientPush(Cut(std::string("\x00\x01", 2), {}), &received, &view).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PartitionCodecTest, RefusesWhatProtobufRefuses) {
  const std::vector<std::string> malformed = {
      std::string("\x08", 1),              // Truncated varint.
      std::string("\x3a\x05" "abc", 5),    // Data longer than the message.
      std::string("\x0b", 1),              // A group never closed.
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // 11-byte varint.
  };
  for (const std::string& bytes : malformed) {
    v1::GradientPush reference;
    EXPECT_FALSE(reference.ParseFromString(bytes)) << testing::PrintToString(bytes);
    ReceivedMessage received;
    GradientPushView view;
    absl::Status status = DecodeGradientPush(Cut(bytes, {1}), &received, &view);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << testing::PrintToString(bytes);
    EXPECT_NE(status.message().find("GradientPush"), absl::string_view::npos) << status;
  }
}

TEST(PartitionCodecTest, RandomBytesDecodeLikeProtobufOrFailCleanly) {
  std::mt19937 random(11);
  int agreed = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes(random() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    v1::GradientPush reference;
    const bool parsed = reference.ParseFromString(bytes);
    ReceivedMessage received;
    GradientPushView view;
    absl::Status status =
        DecodeGradientPush(Cut(bytes, {bytes.size() / 3, bytes.size() / 2}), &received, &view);
    if (parsed && status.ok()) {
      ++agreed;
      EXPECT_EQ(view.step, reference.step());
      EXPECT_EQ(view.node_rank, reference.node_rank());
      EXPECT_EQ(view.sample_count, reference.sample_count());
      EXPECT_EQ(Joined(view.data), reference.data());
    }
    // What protobuf reads, the codec reads. It refuses more: groups, which protobuf
    // skips as unknown fields, and a tag of field 0, where protobuf stops reading.
    if (parsed && !status.ok()) {
      EXPECT_TRUE(status.message().find("group") != absl::string_view::npos ||
                  status.message().find("field number 0") != absl::string_view::npos)
          << status;
    }
  }
  EXPECT_GT(agreed, 100);
}

TEST(PartitionCodecTest, ValuesKeepTheirMessageAliveUntilTheBufferGoes) {
  auto values = std::make_shared<v1::PartitionValues>();
  values->set_partition_id(3);
  values->set_dtype(v1::FLOAT32);
  values->set_version(77);
  values->set_step(78);
  const std::vector<float> floats = Ramp(333, -1.5f);
  values->set_data(reinterpret_cast<const char*>(floats.data()), floats.size() * 4);
  std::weak_ptr<v1::PartitionValues> watch = values;
  grpc::ByteBuffer wire = EncodePartitionValues(std::move(values));
  EXPECT_FALSE(watch.expired());

  v1::PartitionValues parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(wire)));
  EXPECT_EQ(parsed.partition_id(), 3u);
  EXPECT_EQ(parsed.version(), 77u);
  EXPECT_EQ(parsed.step(), 78u);
  EXPECT_EQ(parsed.data().size(), floats.size() * 4);

  ReceivedMessage received;
  PartitionValuesView view;
  ASSERT_TRUE(DecodePartitionValues(Cut(Flatten(wire), {5, 9, 700}), &received, &view).ok());
  EXPECT_EQ(view.partition_id, 3u);
  EXPECT_EQ(view.dtype, v1::FLOAT32);
  EXPECT_EQ(view.step, 78u);
  std::vector<float> out(floats.size());
  EXPECT_TRUE(CopyFloatsInto(view.data, out.data()));
  EXPECT_EQ(out, floats);

  wire.Clear();
  EXPECT_TRUE(watch.expired());
}

TEST(PartitionCodecTest, EmptyDataIsLeftOutAsProtobufDoes) {
  PushHeader header = SomeHeader();
  grpc::ByteBuffer wire = EncodeGradientPush(header, nullptr, 0);
  v1::GradientPush parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(wire)));
  EXPECT_TRUE(parsed.data().empty());
  ReceivedMessage received;
  GradientPushView view;
  ASSERT_TRUE(DecodeGradientPush(wire, &received, &view).ok());
  EXPECT_EQ(view.data.size, 0u);
  EXPECT_EQ(view.job_id, header.job_id);
}

TEST(PartitionCodecTest, SpanLoopsHandleElementsSplitBetweenPieces) {
  const std::vector<float> floats = Ramp(257, 0.125f);
  const std::string bytes(reinterpret_cast<const char*>(floats.data()), floats.size() * 4);
  for (size_t first_cut : {1, 2, 3, 5, 6, 7, 513}) {
    ByteSpans spans;
    spans.Add(absl::string_view(bytes).substr(0, first_cut));
    spans.Add(absl::string_view(bytes).substr(first_cut, 3));
    spans.Add(absl::string_view(bytes).substr(first_cut + 3));
    std::vector<float> widened(floats.size());
    EXPECT_TRUE(WidenInto(v1::FLOAT32, spans, widened.data()));
    EXPECT_EQ(widened, floats) << first_cut;
    std::vector<float> sum(floats.size(), 1.0f);
    EXPECT_TRUE(AccumulateInto(v1::FLOAT32, spans, sum.data()));
    for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(sum[i], 1.0f + floats[i]) << i;
    EXPECT_FALSE(AllZero(v1::FLOAT32, spans));
  }
  // Half precision, cut inside an element.
  std::string halves;
  for (int i = 0; i < 9; ++i) {
    const uint16_t h = FloatToHalf(static_cast<float>(i));
    halves.append(reinterpret_cast<const char*>(&h), 2);
  }
  ByteSpans spans;
  spans.Add(absl::string_view(halves).substr(0, 5));
  spans.Add(absl::string_view(halves).substr(5));
  std::vector<float> widened(9);
  EXPECT_TRUE(WidenInto(v1::FLOAT16, spans, widened.data()));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(widened[i], static_cast<float>(i));
  // Zeros, split; and a non-finite value found across a cut.
  const std::string zeros(16, '\0');
  ByteSpans zero_spans;
  zero_spans.Add(absl::string_view(zeros).substr(0, 7));
  zero_spans.Add(absl::string_view(zeros).substr(7));
  EXPECT_TRUE(AllZero(v1::FLOAT32, zero_spans));
  const float inf = std::numeric_limits<float>::infinity();
  const std::string with_inf(reinterpret_cast<const char*>(&inf), 4);
  ByteSpans inf_spans;
  inf_spans.Add(absl::string_view(with_inf).substr(0, 2));
  inf_spans.Add(absl::string_view(with_inf).substr(2));
  float out = 0;
  EXPECT_FALSE(CopyFloatsInto(inf_spans, &out));
}

TEST(PartitionCodecTest, AccumulateCountsAnOverflowingSumAsNonFinite) {
  const float big = 3e38f;
  const std::string bytes(reinterpret_cast<const char*>(&big), 4);
  float sum = 3e38f;
  EXPECT_FALSE(AccumulateInto(v1::FLOAT32, ByteSpans::Of(bytes), &sum));
}

// The worker's direct receive reads a PartitionValues' fields from its first bytes
// when the shard wrote them (PartitionValuesHead), and declines any other layout.
// The local lane's shared frames: the head in the frame, the data in the shared region.
TEST(PartitionCodecTest, DecodesAMessageWhoseDataLiesApartFromItsHead) {
  PushHeader header;
  header.job_id = "job-7";
  header.generation = 2;
  header.step = 11;
  header.node_rank = 1;
  header.partition_id = 3;
  header.dtype = v1::FLOAT32;
  header.sample_count = 64;
  header.steps = 1;
  const std::vector<float> grad = {1.5f, -2.5f, 0.125f};
  const std::string data(reinterpret_cast<const char*>(grad.data()), grad.size() * 4);
  ReceivedMessage received;
  GradientPushView push;
  ASSERT_TRUE(DecodeGradientPush(GradientPushHead(header, data.size()), data, &received, &push)
                  .ok());
  EXPECT_EQ(push.job_id, "job-7");
  EXPECT_EQ(push.step, 11u);
  EXPECT_EQ(push.partition_id, 3u);
  EXPECT_EQ(push.sample_count, 64u);
  ASSERT_EQ(push.data.pieces.size(), 1u) << "one piece: the data where it lies";
  EXPECT_EQ(push.data.pieces[0].data(), data.data());
  // A head that announces more or fewer bytes than lie apart is refused.
  EXPECT_FALSE(DecodeGradientPush(GradientPushHead(header, data.size() + 4), data, &received,
                                  &push)
                   .ok());
  EXPECT_FALSE(DecodeGradientPush(GradientPushHead(header, data.size() - 4), data, &received,
                                  &push)
                   .ok());

  v1::PartitionValues values;
  values.set_partition_id(3);
  values.set_dtype(v1::FLOAT32);
  values.set_version(12);
  values.set_step(12);
  values.set_data(data);
  PartitionValuesView view;
  ASSERT_TRUE(DecodePartitionValues(PartitionValuesHead(values), data, &received, &view).ok());
  EXPECT_EQ(view.partition_id, 3u);
  EXPECT_EQ(view.step, 12u);
  EXPECT_EQ(Joined(view.data), data);
}

TEST(PartitionCodecTest, ValuesHeadParsesTheShardsLayoutOnly) {
  v1::PartitionValues values;
  values.set_partition_id(7);
  values.set_dtype(v1::FLOAT32);
  values.set_version(123456789);
  values.set_step(42);
  values.set_data(std::string(4096, 'v'));
  const std::string head = PartitionValuesHead(values);
  v1::PartitionValues parsed;  // The data field last: protobuf reads it the same.
  ASSERT_TRUE(parsed.ParseFromString(head + values.data()));
  EXPECT_EQ(parsed.SerializeAsString(), values.SerializeAsString());
  const std::string wire = head + values.data();
  PartitionValuesView view;
  size_t offset = 0;
  ASSERT_TRUE(ParseValuesHead(absl::string_view(wire).substr(0, 64), wire.size(), &view, &offset));
  EXPECT_EQ(view.partition_id, 7u);
  EXPECT_EQ(view.dtype, v1::FLOAT32);
  EXPECT_EQ(view.version, 123456789u);
  EXPECT_EQ(view.step, 42u);
  EXPECT_EQ(offset, head.size());
  // The data must run to the message's end, its head must be in the prefix, and no
  // field other than 1, 2, 4, 5 may come before it.
  EXPECT_FALSE(ParseValuesHead(absl::string_view(wire).substr(0, 64), wire.size() + 1, &view,
                               &offset));
  EXPECT_FALSE(ParseValuesHead(absl::string_view(wire).substr(0, 3), wire.size(), &view, &offset));
  const std::string unknown = std::string("\x30\x01", 2) + wire;  // Field 6 first.
  EXPECT_FALSE(ParseValuesHead(absl::string_view(unknown).substr(0, 64), unknown.size(), &view,
                               &offset));
  std::mt19937 random(11);
  for (int i = 0; i < 2000; ++i) {  // Random prefixes never read past what they hold.
    std::string bytes(random() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    if (ParseValuesHead(bytes, bytes.size() + random() % 100, &view, &offset)) {
      EXPECT_LE(offset, bytes.size());
    }
  }
}

}  // namespace
}  // namespace tributary
