#include "common/partition_codec.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tributary {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutTag(std::string* out, uint32_t field, uint32_t wire_type) {
  PutVarint(out, (uint64_t{field} << 3) | wire_type);
}

// A varint field as protobuf writes it: left out when zero.
void PutVarintField(std::string* out, uint32_t field, uint64_t value) {
  if (value == 0) return;
  PutTag(out, field, kVarint);
  PutVarint(out, value);
}

// Reads protobuf wire format across the pieces of a received message, in place.
class WireReader {
 public:
  explicit WireReader(const std::vector<absl::string_view>& pieces) : slices_(pieces) {
    for (absl::string_view piece : pieces) size_ += piece.size();
    SkipEmpty();
  }

  bool done() const { return offset_ == size_; }
  size_t offset() const { return offset_; }

  bool ReadByte(uint8_t* byte) {
    if (offset_ == size_) return false;
    *byte = Piece()[pos_];
    Advance(1);
    return true;
  }

  // At most 10 bytes, as protobuf reads them (bits past 64 are dropped).
  bool ReadVarint(uint64_t* value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      if (shift < 64) result |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        *value = result;
        return true;
      }
    }
    return false;  // More than 10 bytes: malformed.
  }

  bool Skip(uint64_t n) {
    if (n > size_ - offset_) return false;
    Advance(n);
    return true;
  }

  // The next n bytes as pieces of the message (no copy).
  bool ReadSpans(uint64_t n, ByteSpans* out) {
    if (n > size_ - offset_) return false;
    out->Clear();
    while (n > 0) {
      const size_t take = std::min<uint64_t>(n, PieceSize() - pos_);
      out->Add(absl::string_view(reinterpret_cast<const char*>(Piece()) + pos_, take));
      Advance(take);
      n -= take;
    }
    return true;
  }

  bool ReadString(uint64_t n, std::string* out) {
    if (n > size_ - offset_) return false;
    out->clear();
    while (n > 0) {
      const size_t take = std::min<uint64_t>(n, PieceSize() - pos_);
      out->append(reinterpret_cast<const char*>(Piece()) + pos_, take);
      Advance(take);
      n -= take;
    }
    return true;
  }

 private:
  const uint8_t* Piece() const {
    return reinterpret_cast<const uint8_t*>(slices_[piece_].data());
  }
  size_t PieceSize() const { return slices_[piece_].size(); }

  void SkipEmpty() {
    while (piece_ < slices_.size() && pos_ == slices_[piece_].size()) {
      ++piece_;
      pos_ = 0;
    }
  }

  void Advance(size_t n) {
    offset_ += n;
    while (n > 0) {
      const size_t left = PieceSize() - pos_;
      if (n < left) {
        pos_ += n;
        return;
      }
      n -= left;
      pos_ = PieceSize();
      SkipEmpty();
    }
    SkipEmpty();
  }

  const std::vector<absl::string_view>& slices_;
  size_t size_ = 0;
  size_t offset_ = 0;
  size_t piece_ = 0;  // Current slice and position in it.
  size_t pos_ = 0;
};

absl::Status Malformed(const char* message, size_t offset, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(message, ": not a valid protobuf message at byte ", offset, " (", what, ")"));
}

// Reads every field: varint fields go to on_varint (which ignores fields that are not
// its own), length-delimited ones to on_bytes (which reads those it handles). A field
// with another wire type than its own is skipped, as protobuf keeps it among the
// unknown fields.
absl::Status Walk(WireReader& reader, const char* message,
                  const std::function<bool(uint32_t, uint64_t)>& on_varint,
                  const std::function<bool(uint32_t, uint64_t, bool*)>& on_bytes) {
  while (!reader.done()) {
    const size_t at = reader.offset();
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return Malformed(message, at, "truncated tag");
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || field > 536870911) return Malformed(message, at, "field number 0");
    bool ok = true;
    switch (wire_type) {
      case kVarint: {
        uint64_t value;
        if (!reader.ReadVarint(&value)) return Malformed(message, at, "truncated varint");
        on_varint(static_cast<uint32_t>(field), value);
        break;
      }
      case kFixed64:
        ok = reader.Skip(8);
        break;
      case kFixed32:
        ok = reader.Skip(4);
        break;
      case kLengthDelimited: {
        uint64_t length;
        if (!reader.ReadVarint(&length)) return Malformed(message, at, "truncated length");
        bool handled = false;
        ok = on_bytes(static_cast<uint32_t>(field), length, &handled);
        if (ok && !handled) ok = reader.Skip(length);
        break;
      }
      default:
        return Malformed(message, at, "group or unknown wire type");
    }
    if (!ok) return Malformed(message, at, "field runs past the end");
  }
  return absl::OkStatus();
}

absl::Status Dump(const grpc::ByteBuffer& buffer, ReceivedMessage* received, const char* message) {
  received->slices.clear();
  received->pieces.clear();
  if (!buffer.Valid()) return absl::OkStatus();  // An empty message.
  grpc::Status dumped = buffer.Dump(&received->slices);
  if (!dumped.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(message, ": unreadable message: ", dumped.error_message()));
  }
  for (const grpc::Slice& slice : received->slices) {
    received->pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return absl::OkStatus();
}

void ReleaseValues(void* holder) {
  delete static_cast<std::shared_ptr<const v1::PartitionValues>*>(holder);
}

}  // namespace

std::string GradientPushHead(const PushHeader& header, size_t data_size) {
  std::string head;
  head.reserve(64 + header.job_id.size());
  if (!header.job_id.empty()) {
    PutTag(&head, 1, kLengthDelimited);
    PutVarint(&head, header.job_id.size());
    head.append(header.job_id);
  }
  PutVarintField(&head, 2, header.generation);
  PutVarintField(&head, 3, header.step);
  PutVarintField(&head, 4, header.node_rank);
  PutVarintField(&head, 5, header.partition_id);
  PutVarintField(&head, 6, static_cast<uint32_t>(header.dtype));
  PutVarintField(&head, 8, header.sample_count);
  PutVarintField(&head, 9, header.steps);
  if (data_size > 0) {
    PutTag(&head, 7, kLengthDelimited);
    PutVarint(&head, data_size);
  }
  return head;
}

grpc::ByteBuffer EncodeGradientPush(const PushHeader& header, const char* data, size_t size) {
  std::string head = GradientPushHead(header, size);
  if (size == 0) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(head),
                           grpc::Slice(data, size, grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, 2);
}

std::string PartitionValuesHead(const v1::PartitionValues& values) {
  std::string head;
  head.reserve(48);
  PutVarintField(&head, 1, values.partition_id());
  PutVarintField(&head, 2, static_cast<uint32_t>(values.dtype()));
  PutVarintField(&head, 4, values.version());
  PutVarintField(&head, 5, values.step());
  if (!values.data().empty()) {
    PutTag(&head, 3, kLengthDelimited);
    PutVarint(&head, values.data().size());
  }
  return head;
}

grpc::ByteBuffer EncodePartitionValues(std::shared_ptr<const v1::PartitionValues> values) {
  std::string head = PartitionValuesHead(*values);
  const std::string& data = values->data();
  if (data.empty()) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  void* bytes = const_cast<char*>(data.data());
  const size_t size = data.size();
  auto* holder = new std::shared_ptr<const v1::PartitionValues>(std::move(values));
  grpc::Slice slices[2] = {grpc::Slice(head), grpc::Slice(bytes, size, &ReleaseValues, holder)};
  return grpc::ByteBuffer(slices, 2);
}

namespace {

absl::Status DecodePushPieces(const std::vector<absl::string_view>& pieces,
                              GradientPushView* push) {
  constexpr const char* kMessage = "GradientPush";
  // Field by field, so that the job id's buffer is reused from push to push.
  push->job_id.clear();
  push->generation = 0;
  push->step = 0;
  push->node_rank = 0;
  push->partition_id = 0;
  push->dtype = v1::DTYPE_UNSPECIFIED;
  push->sample_count = 0;
  push->steps = 0;
  push->data.Clear();
  WireReader reader(pieces);
  return Walk(
      reader, kMessage,
      [push](uint32_t field, uint64_t value) {
        switch (field) {
          case 2: push->generation = value; break;
          case 3: push->step = value; break;
          case 4: push->node_rank = static_cast<uint32_t>(value); break;
          case 5: push->partition_id = static_cast<uint32_t>(value); break;
          case 6: push->dtype = static_cast<v1::DType>(static_cast<int32_t>(value)); break;
          case 8: push->sample_count = value; break;
          case 9: push->steps = static_cast<uint32_t>(value); break;
          default: return false;
        }
        return true;
      },
      [push, &reader](uint32_t field, uint64_t length, bool* handled) {
        *handled = field == 1 || field == 7;
        if (field == 1) return reader.ReadString(length, &push->job_id);
        if (field == 7) return reader.ReadSpans(length, &push->data);
        return true;
      });
}

absl::Status DecodeValuesPieces(const std::vector<absl::string_view>& pieces,
                                PartitionValuesView* values) {
  constexpr const char* kMessage = "PartitionValues";
  values->partition_id = 0;
  values->dtype = v1::DTYPE_UNSPECIFIED;
  values->version = 0;
  values->step = 0;
  values->data.Clear();
  WireReader reader(pieces);
  return Walk(
      reader, kMessage,
      [values](uint32_t field, uint64_t value) {
        switch (field) {
          case 1: values->partition_id = static_cast<uint32_t>(value); break;
          case 2: values->dtype = static_cast<v1::DType>(static_cast<int32_t>(value)); break;
          case 4: values->version = value; break;
          case 5: values->step = value; break;
          default: return false;
        }
        return true;
      },
      [values, &reader](uint32_t field, uint64_t length, bool* handled) {
        *handled = field == 3;
        if (field == 3) return reader.ReadSpans(length, &values->data);
        return true;
      });
}

}  // namespace

absl::Status DecodeGradientPush(const grpc::ByteBuffer& buffer, ReceivedMessage* received,
                                GradientPushView* push) {
  if (absl::Status dumped = Dump(buffer, received, "GradientPush"); !dumped.ok()) return dumped;
  return DecodePushPieces(received->pieces, push);
}

absl::Status DecodePartitionValues(const grpc::ByteBuffer& buffer, ReceivedMessage* received,
                                   PartitionValuesView* values) {
  if (absl::Status dumped = Dump(buffer, received, "PartitionValues"); !dumped.ok()) {
    return dumped;
  }
  return DecodeValuesPieces(received->pieces, values);
}

namespace {

// `received` as one contiguous message.
const std::vector<absl::string_view>& OnePiece(absl::string_view bytes,
                                               ReceivedMessage* received) {
  received->slices.clear();
  received->pieces.clear();
  if (!bytes.empty()) received->pieces.push_back(bytes);
  return received->pieces;
}

}  // namespace

absl::Status DecodeGradientPush(absl::string_view bytes, ReceivedMessage* received,
                                GradientPushView* push) {
  return DecodePushPieces(OnePiece(bytes, received), push);
}

absl::Status DecodePartitionValues(absl::string_view bytes, ReceivedMessage* received,
                                   PartitionValuesView* values) {
  return DecodeValuesPieces(OnePiece(bytes, received), values);
}

namespace {

const std::vector<absl::string_view>& TwoPieces(absl::string_view head, absl::string_view data,
                                                ReceivedMessage* received) {
  received->slices.clear();
  received->pieces.clear();
  if (!head.empty()) received->pieces.push_back(head);
  if (!data.empty()) received->pieces.push_back(data);
  return received->pieces;
}

}  // namespace

absl::Status DecodeGradientPush(absl::string_view head, absl::string_view data,
                                ReceivedMessage* received, GradientPushView* push) {
  return DecodePushPieces(TwoPieces(head, data, received), push);
}

absl::Status DecodePartitionValues(absl::string_view head, absl::string_view data,
                                   ReceivedMessage* received, PartitionValuesView* values) {
  return DecodeValuesPieces(TwoPieces(head, data, received), values);
}

bool ParseValuesHead(absl::string_view prefix, uint64_t message_size, PartitionValuesView* values,
                     size_t* data_offset) {
  values->partition_id = 0;
  values->dtype = v1::DTYPE_UNSPECIFIED;
  values->version = 0;
  values->step = 0;
  values->data.Clear();
  const std::vector<absl::string_view> pieces = {prefix};
  WireReader reader(pieces);
  while (!reader.done()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return false;
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 3 && wire_type == kLengthDelimited) {
      uint64_t length;
      if (!reader.ReadVarint(&length)) return false;
      const uint64_t offset = reader.offset();
      if (offset > message_size || length != message_size - offset) return false;
      *data_offset = static_cast<size_t>(offset);
      return true;
    }
    uint64_t value;
    if (wire_type != kVarint || !reader.ReadVarint(&value)) return false;
    switch (field) {
      case 1: values->partition_id = static_cast<uint32_t>(value); break;
      case 2: values->dtype = static_cast<v1::DType>(static_cast<int32_t>(value)); break;
      case 4: values->version = value; break;
      case 5: values->step = value; break;
      default: return false;
    }
  }
  return false;  // The data field's head is not inside the prefix.
}

GradientPushView ViewOf(const v1::GradientPush& push) {
  GradientPushView view;
  view.job_id = push.job_id();
  view.generation = push.generation();
  view.step = push.step();
  view.node_rank = push.node_rank();
  view.partition_id = push.partition_id();
  view.dtype = push.dtype();
  view.sample_count = push.sample_count();
  view.steps = push.steps();
  view.data = ByteSpans::Of(push.data());
  return view;
}

}  // namespace tributary
