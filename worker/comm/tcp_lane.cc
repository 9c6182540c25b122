#include "worker/comm/tcp_lane.h"

#include <glog/logging.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_auth.h"
#include "common/data_plane_wire.h"
#include "common/grpc_status.h"
#include "common/secure_random.h"

namespace tributary::worker {
namespace {

constexpr absl::Duration kConnectTimeout = absl::Seconds(10);
// The local socket's connect and proof: the shard answers from memory, and a listener
// that holds them (a squatter) delays the TCP attempt by at most this much.
constexpr absl::Duration kLocalTimeout = absl::Seconds(2);

// The shard's answer to what the client just sent (`what`: the hello, a region): a
// status frame, into *answer. Returns the read's error, or INVALID_ARGUMENT when the
// shard answered with another kind of frame.
absl::Status ReadStatusAnswer(int fd, absl::string_view what, absl::Status* answer) {
  absl::StatusOr<data_plane::FrameHeader> header =
      data_plane::ReadFrameHeader(fd, 0, absl::StrCat("data plane answer to the ", what));
  if (!header.ok()) return header.status();
  if (header->kind != data_plane::kStatus) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shard answered the ", what, " with a frame of kind ", header->kind));
  }
  std::string payload(header->length, '\0');
  absl::Status read = data_plane::ReadFull(fd, payload.data(), payload.size(),
                                           absl::StrCat("data plane answer to the ", what));
  if (!read.ok()) return read;
  *answer = data_plane::ParseStatusPayload(payload);
  return absl::OkStatus();
}

// The shard's answer to the hello: a status frame.
absl::Status Admission(int fd, absl::string_view ticket) {
  auto hello = data_plane::EncodeHello(ticket);
  iovec piece = {hello.data(), hello.size()};
  absl::Status admitted = data_plane::WriteAll(fd, &piece, 1, "data plane hello");
  if (!admitted.ok()) return admitted;
  data_plane::SetReceiveTimeout(fd, kConnectTimeout);
  absl::Status answer;
  if (absl::Status read = ReadStatusAnswer(fd, "hello", &answer); !read.ok()) return read;
  return answer;
}

// OpenDataPlane: a ticket and the data port, or the error with whose it is.
absl::StatusOr<v1::OpenDataPlaneResponse> OpenDataPlane(const TcpLane::Target& target,
                                                        ConnectAbort& abort,
                                                        DataPlaneTrouble* trouble) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kConnectTimeout));
  if (!target.identity->node_credential.empty()) {
    context.AddMetadata(kNodeCredentialMetadata, target.identity->node_credential);
  }
  // Close() cancels the call rather than wait for its deadline.
  if (!abort.BeginCall(&context)) return absl::CancelledError("PS client closed");
  v1::OpenDataPlaneRequest request;
  request.set_job_id(target.identity->job_id);
  request.set_generation(target.identity->generation);
  request.set_node_rank(target.identity->node_rank);
  v1::OpenDataPlaneResponse response;
  absl::Status opened = FromGrpcStatus(target.stub->OpenDataPlane(&context, request, &response),
                                       absl::StrCat("OpenDataPlane on ", target.name));
  abort.EndCall();
  if (opened.ok()) return response;
  switch (opened.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      *trouble = DataPlaneTrouble::kShardUnreachable;
      return absl::UnavailableError(opened.message());
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      *trouble = DataPlaneTrouble::kNone;
      return opened;
    case absl::StatusCode::kResourceExhausted:  // Too many tickets now: later.
      *trouble = DataPlaneTrouble::kDataPort;
      return absl::UnavailableError(opened.message());
    default:  // A refusal of the caller: gRPC's PushPull would refuse it too.
      *trouble = DataPlaneTrouble::kRefused;
      return opened;
  }
}

// The shard's local socket, admitted: the shard proves it issued `ticket`, from
// `namespace_id` (this process's network namespace), before the ticket is sent.
// NOT_FOUND when nothing listens at the name here (another host) and PERMISSION_DENIED
// for a wrong proof, both with the ticket unsent (*sent false).
absl::StatusOr<int> ConnectLocalLane(const std::string& name, const std::string& ticket,
                                     const std::string& namespace_id, ConnectAbort& abort,
                                     bool* sent) {
  *sent = false;
  absl::StatusOr<int> fd = data_plane::ConnectLocal(name, kLocalTimeout);
  if (!fd.ok()) return fd.status();
  if (!abort.BeginAdmission(*fd)) {
    ::close(*fd);
    return absl::CancelledError("PS client closed");
  }
  absl::Status admitted = [&]() -> absl::Status {
    absl::StatusOr<std::string> challenge = SecureRandomBytes(data_plane::kDigestBytes);
    if (!challenge.ok()) return challenge.status();
    auto request = data_plane::EncodeLocalRequest(data_plane::TicketDigest(ticket), *challenge);
    iovec piece = {request.data(), request.size()};
    if (absl::Status s = data_plane::WriteAll(*fd, &piece, 1, "local data plane request");
        !s.ok()) {
      return s;
    }
    data_plane::SetReceiveTimeout(*fd, kLocalTimeout);
    std::string proof(data_plane::kDigestBytes, '\0');
    if (absl::Status s =
            data_plane::ReadFull(*fd, proof.data(), proof.size(), "local data plane proof");
        !s.ok()) {
      return s;  // Closed unanswered: the shard there issued no such ticket.
    }
    if (!data_plane::SameBytes(proof,
                               data_plane::LocalProof(ticket, *challenge, namespace_id))) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the local socket @", name,
          " answered with a wrong proof: it is not the shard that issued the ticket, in this "
          "network namespace"));
    }
    *sent = true;
    return Admission(*fd, ticket);
  }();
  abort.EndAdmission();
  if (!admitted.ok()) {
    ::close(*fd);
    return admitted;
  }
  return *fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpLane>> TcpLane::Connect(const Target& target,
                                                          ConnectAbort& abort,
                                                          DirectReceiver* direct,
                                                          DataPlaneTrouble* trouble) {
  *trouble = DataPlaneTrouble::kDataPort;
  if (target.stub == nullptr) {
    *trouble = DataPlaneTrouble::kRefused;
    return absl::InvalidArgumentError(absl::StrCat(target.name, ": no channel"));
  }
  absl::StatusOr<v1::OpenDataPlaneResponse> response = OpenDataPlane(target, abort, trouble);
  if (!response.ok()) return response.status();
  // From here on every failure is the data port's (or the network's): UNAVAILABLE.
  *trouble = DataPlaneTrouble::kDataPort;
  absl::StatusOr<std::string> host = data_plane::HostOf(target.address);
  if (!host.ok()) return absl::UnavailableError(host.status().message());
  if (response->port() == 0 || response->port() > 65535 ||
      response->ticket().size() != data_plane::kTicketBytes) {
    return absl::UnavailableError(
        absl::StrCat("OpenDataPlane on ", target.name, ": port ", response->port(),
                     " and a ticket of ", response->ticket().size(), " bytes (expected ",
                     data_plane::kTicketBytes, ")"));
  }
  if (target.local != Local::kNever && !response->local_socket().empty()) {
    bool sent = false;
    const std::string namespace_id = target.namespace_id.empty()
                                         ? data_plane::LocalNamespaceId()
                                         : target.namespace_id;
    absl::StatusOr<int> local = ConnectLocalLane(response->local_socket(), response->ticket(),
                                                 namespace_id, abort, &sent);
    if (local.ok() && (target.node_region != nullptr || !target.shared_partitions.empty())) {
      // Close() shuts the socket down while it waits for the shard's answer.
      if (!abort.BeginAdmission(*local)) {
        ::close(*local);
        return absl::CancelledError("PS client closed");
      }
      absl::StatusOr<std::pair<std::shared_ptr<SharedRegion>, std::vector<SharedSlot>>> shared;
      if (target.node_region != nullptr) {
        absl::Status offered = OfferRegion(*local, *target.node_region, kLocalTimeout);
        if (offered.ok()) {
          shared = std::make_pair(target.node_region, std::vector<SharedSlot>());
        } else {
          shared = offered;
        }
      } else {
        absl::StatusOr<std::pair<SharedRegion, std::vector<SharedSlot>>> own =
            OfferShared(*local, target.shared_partitions, kLocalTimeout);
        if (own.ok()) {
          shared = std::make_pair(std::make_shared<SharedRegion>(std::move(own->first)),
                                  std::move(own->second));
        } else {
          shared = own.status();
        }
      }
      abort.EndAdmission();
      if (shared.ok()) {
        data_plane::SetReceiveTimeout(*local, absl::ZeroDuration());
        data_plane::SetSendTimeout(*local, target.send_timeout);
        *trouble = DataPlaneTrouble::kNone;
        return AdoptShared(*local, target.name, target.max_values_frame, direct,
                           std::move(shared->first), std::move(shared->second));
      }
      if (absl::IsFailedPrecondition(shared.status())) {
        LOG(WARNING) << "local data plane of " << target.name << ": " << shared.status().message()
                     << "; its bytes go through the socket";
      } else {
        ::close(*local);
        local = shared.status();
      }
    }
    if (local.ok()) {
      data_plane::SetReceiveTimeout(*local, absl::ZeroDuration());
      data_plane::SetSendTimeout(*local, target.send_timeout);
      *trouble = DataPlaneTrouble::kNone;
      return Adopt(*local, target.name, target.max_values_frame, direct, /*local=*/true);
    }
    // Close() shuts the socket down mid-proof: not the local socket's failure.
    if (absl::IsCancelled(local.status()) || abort.aborted()) {
      return absl::CancelledError("PS client closed");
    }
    // A ticket presented is spent; out of reach (another host) is the usual case, a
    // wrong proof or an unanswered request is worth a line.
    if (sent || target.local == Local::kOnly) {
      return absl::UnavailableError(absl::StrCat("local data plane of ", target.name, ": ",
                                                 local.status().message()));
    }
    if (!absl::IsNotFound(local.status())) {
      LOG(WARNING) << "local data plane of " << target.name << ": " << local.status().message()
                   << "; using its TCP data port";
    }
  } else if (target.local == Local::kOnly) {
    *trouble = DataPlaneTrouble::kNone;  // The shard's answer, as "runs no data plane".
    return absl::FailedPreconditionError(absl::StrCat(
        target.name, " announced no local socket (--ps_transport=local needs one: a shard "
        "in this network namespace with --data_local_socket)"));
  }
  absl::StatusOr<int> fd =
      data_plane::Connect(*host, static_cast<int>(response->port()), kConnectTimeout);
  if (!fd.ok()) return absl::UnavailableError(fd.status().message());
  // Close() shuts the socket down while it waits for admission.
  if (!abort.BeginAdmission(*fd)) {
    ::close(*fd);
    return absl::CancelledError("PS client closed");
  }
  absl::Status admitted = Admission(*fd, response->ticket());
  abort.EndAdmission();
  if (!admitted.ok()) {
    ::close(*fd);
    // Closed unanswered (the shard's connection limit, a restart), an expired ticket,
    // a timeout: all worth another ticket later (or gRPC, in auto).
    return absl::UnavailableError(absl::StrCat("data plane of ", target.name, " at ", *host, ":",
                                               response->port(), ": ", admitted.message()));
  }
  data_plane::SetReceiveTimeout(*fd, absl::ZeroDuration());
  // A shard that stops reading fails a push after this long instead of holding it.
  data_plane::SetSendTimeout(*fd, target.send_timeout);
  *trouble = DataPlaneTrouble::kNone;
  return Adopt(*fd, target.name, target.max_values_frame, direct);
}

std::unique_ptr<TcpLane> TcpLane::Adopt(int fd, const std::string& name,
                                        uint64_t max_values_frame, DirectReceiver* direct,
                                        bool local) {
  const char* lane = local ? " (local data plane)" : " (data plane)";
  return std::unique_ptr<TcpLane>(new TcpLane(fd, absl::StrCat("PushPull to ", name, lane),
                                              max_values_frame, direct, local));
}

std::unique_ptr<TcpLane> TcpLane::AdoptShared(int fd, const std::string& name,
                                              uint64_t max_values_frame, DirectReceiver* direct,
                                              std::shared_ptr<SharedRegion> region,
                                              std::vector<SharedSlot> slots) {
  std::unique_ptr<TcpLane> lane(new TcpLane(
      fd, absl::StrCat("PushPull to ", name, " (local data plane, shared memory)"),
      max_values_frame, direct, /*local=*/true));
  lane->region_ = std::move(region);
  lane->shared_ = std::move(slots);
  return lane;
}

std::vector<TcpLane::SharedSlot> TcpLane::LayOutShared(
    const std::vector<std::pair<uint32_t, uint64_t>>& partitions, uint64_t* bytes) {
  constexpr uint64_t kAlign = 64;  // Each slot starts on a cache line.
  auto aligned = [](uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  std::vector<SharedSlot> slots;
  uint64_t at = 0;
  for (const auto& [id, size] : partitions) {
    if (size == 0) continue;
    if (slots.size() <= id) slots.resize(static_cast<size_t>(id) + 1);
    SharedSlot& slot = slots[id];
    slot.present = true;
    slot.bytes = size;
    slot.push_offset = at;
    at += aligned(size);
    slot.values_offset = at;
    at += aligned(size);
  }
  *bytes = at;
  return slots;
}

absl::StatusOr<std::pair<SharedRegion, std::vector<TcpLane::SharedSlot>>> TcpLane::OfferShared(
    int fd, const std::vector<std::pair<uint32_t, uint64_t>>& partitions,
    absl::Duration timeout) {
  uint64_t bytes = 0;
  std::vector<SharedSlot> slots = LayOutShared(partitions, &bytes);
  if (bytes == 0) return absl::FailedPreconditionError("no partition needs a shared slot");
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(bytes);
  if (!region.ok()) return absl::FailedPreconditionError(region.status().message());
  absl::Status offered = OfferRegion(fd, *region, timeout);
  region->CloseDescriptor();  // The shard holds it now (or never will).
  if (!offered.ok()) return offered;
  return std::make_pair(*std::move(region), std::move(slots));
}

absl::Status TcpLane::OfferRegion(int fd, const SharedRegion& region, absl::Duration timeout) {
  auto offer = data_plane::EncodeRegionOffer(region.size());
  iovec piece = {offer.data(), offer.size()};
  absl::Status sent = WriteWithDescriptor(fd, &piece, 1, region.fd(), "shared region offer");
  if (!sent.ok()) return absl::UnavailableError(sent.message());
  data_plane::SetReceiveTimeout(fd, timeout);
  absl::Status answer;
  if (absl::Status read = ReadStatusAnswer(fd, "shared region", &answer); !read.ok()) {
    return absl::UnavailableError(read.message());
  }
  if (!answer.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("the shard refused a shared region of ",
                                                      region.size(), " bytes: ", answer.message()));
  }
  return absl::OkStatus();
}

std::optional<uint64_t> TcpLane::OffsetInRegion(const void* at, size_t bytes) const {
  const auto base = reinterpret_cast<uintptr_t>(region_->data());
  const auto address = reinterpret_cast<uintptr_t>(at);
  if (address < base) return std::nullopt;
  const uint64_t offset = address - base;
  if (!region_->Holds(offset, bytes)) return std::nullopt;
  return offset;
}

TcpLane::~TcpLane() { ::close(fd_); }

void TcpLane::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

bool TcpLane::Write(const PushHeader& header, const char* data, size_t bytes,
                    AnswerInto answer) {
  std::string head = GradientPushHead(header, bytes);
  const SharedSlot* slot = header.partition_id < shared_.size() &&
                                   shared_[header.partition_id].present
                               ? &shared_[header.partition_id]
                               : nullptr;
  data_plane::SharedPlace place;
  bool placed = false;
  if (region_ != nullptr && bytes > 0 && head.size() <= data_plane::kMessageOverheadBytes) {
    if (std::optional<uint64_t> at = OffsetInRegion(data, bytes)) {
      // Already there (the node's gradients): nothing to copy.
      place.offset = *at;
      placed = true;
    } else if (slot != nullptr && bytes <= slot->bytes) {
      // Into the partition's push slot. The shard reads the slot only for this push:
      // the next push of the partition follows its update.
      std::memcpy(region_->data() + slot->push_offset, data, bytes);
      place.offset = slot->push_offset;
      placed = true;
    }
  }
  if (placed) {
    // The rest in one small frame that also names where the update may go.
    place.size = bytes;
    std::optional<uint64_t> answer_at;
    if (answer.data != nullptr) answer_at = OffsetInRegion(answer.data, answer.bytes);
    if (answer_at.has_value()) {
      place.answer_offset = *answer_at;
      place.answer_capacity = answer.bytes;
    } else if (slot != nullptr) {
      place.answer_offset = slot->values_offset;
      place.answer_capacity = slot->bytes;
    }
    auto prefix = data_plane::EncodeSharedPlace(place);
    auto frame = data_plane::EncodeFrameHeader(data_plane::kShared, prefix.size() + head.size());
    iovec pieces[3] = {{frame.data(), frame.size()},
                       {prefix.data(), prefix.size()},
                       {head.data(), head.size()}};
    if (data_plane::WriteAll(fd_, pieces, 3, "PushPull push").ok()) return true;
    Shutdown();
    return false;
  }
  // Frame header, message head and the data where it lies, in one sendmsg: when it
  // returns, the kernel holds the bytes and the caller may reuse its buffer.
  auto frame = data_plane::EncodeFrameHeader(data_plane::kMessage, head.size() + bytes);
  iovec pieces[3] = {{frame.data(), frame.size()},
                     {head.data(), head.size()},
                     {const_cast<char*>(data), bytes}};
  if (data_plane::WriteAll(fd_, pieces, bytes == 0 ? 2 : 3, "PushPull push").ok()) return true;
  Shutdown();  // The reader sees it and the lane is replaced.
  return false;
}

LaneRead TcpLane::ReceiveDirect(const char* prefix, size_t prefix_size, size_t data_offset,
                                uint64_t message_size, const PartitionValuesView& head,
                                float* into, absl::Status* status) {
  char* bytes = reinterpret_cast<char*>(into);
  const size_t in_prefix = prefix_size - data_offset;
  std::memcpy(bytes, prefix + data_offset, in_prefix);
  absl::Status read =
      data_plane::ReadFull(fd_, bytes + in_prefix, message_size - data_offset - in_prefix, what_);
  direct_->Landed(head, message_size - data_offset, read, /*in_place=*/false);
  if (!read.ok()) {
    *status = absl::UnavailableError(read.message());
    return LaneRead::kEnded;
  }
  return LaneRead::kLanded;
}

LaneRead TcpLane::ReadShared(uint64_t length, ReceivedMessage& received,
                            PartitionValuesView& values, absl::Status* status) {
  char payload[data_plane::kSharedPrefixBytes + data_plane::kMessageOverheadBytes];
  if (absl::Status read = data_plane::ReadFull(fd_, payload, length, what_); !read.ok()) {
    *status = absl::UnavailableError(read.message());
    return LaneRead::kEnded;
  }
  const data_plane::SharedPlace place =
      length >= data_plane::kSharedPrefixBytes ? data_plane::ParseSharedPlace(payload)
                                               : data_plane::SharedPlace{};
  if (region_ == nullptr || length < data_plane::kSharedPrefixBytes ||
      !region_->Holds(place.offset, place.size)) {
    *status = absl::InvalidArgumentError(absl::StrCat(
        what_, ": a shared update of ", length, " bytes at [", place.offset, ", +", place.size,
        ") outside the region of ", region_ == nullptr ? 0 : region_->size(), " bytes"));
    return LaneRead::kEnded;
  }
  const absl::string_view head(payload + data_plane::kSharedPrefixBytes,
                               length - data_plane::kSharedPrefixBytes);
  const char* data = region_->data() + place.offset;
  PartitionValuesView parsed;
  size_t data_offset = 0;
  if (direct_ != nullptr && ParseValuesHead(head, head.size() + place.size, &parsed,
                                            &data_offset) &&
      data_offset == head.size()) {
    if (float* into = direct_->Claim(*this, parsed, place.size)) {
      // The shard wrote it where it was expected (a node region): already in place.
      const bool in_place = reinterpret_cast<const char*>(into) == data;
      if (!in_place) std::memcpy(into, data, place.size);
      direct_->Landed(parsed, place.size, absl::OkStatus(), in_place);
      return LaneRead::kLanded;
    }
  }
  // Kept in the lane's own buffer: the slot is the shard's to write again after the
  // partition's next push.
  std::vector<char>& bytes = received.bytes;
  bytes.resize(head.size() + place.size);
  std::memcpy(bytes.data(), head.data(), head.size());
  std::memcpy(bytes.data() + head.size(), data, place.size);
  *status = DecodePartitionValues(absl::string_view(bytes.data(), bytes.size()), &received,
                                  &values);
  return LaneRead::kMessage;
}

LaneRead TcpLane::Read(ReceivedMessage& received, PartitionValuesView& values,
                       absl::Status* status) {
  absl::StatusOr<data_plane::FrameHeader> header =
      data_plane::ReadFrameHeader(fd_, max_values_frame_, what_);
  if (!header.ok()) {
    // The shard closed without a status, or the socket broke: reconnect. A frame too
    // large is the shard's fault and stays INVALID_ARGUMENT.
    *status = absl::IsInvalidArgument(header.status())
                  ? header.status()
                  : absl::UnavailableError(header.status().message());
    return LaneRead::kEnded;
  }
  if (header->kind == data_plane::kShared) {
    return ReadShared(header->length, received, values, status);
  }
  if (header->kind == data_plane::kRegion) {
    *status = absl::InvalidArgumentError(absl::StrCat(what_, ": the shard sent a region frame"));
    return LaneRead::kEnded;
  }
  // The message's first bytes: when they show the awaited update of a partition
  // expected into the parameters, its data is received straight there.
  char prefix[64];
  const size_t prefix_size = std::min<uint64_t>(sizeof(prefix), header->length);
  if (absl::Status read = data_plane::ReadFull(fd_, prefix, prefix_size, what_); !read.ok()) {
    *status = absl::UnavailableError(read.message());
    return LaneRead::kEnded;
  }
  PartitionValuesView head;
  size_t data_offset = 0;
  if (direct_ != nullptr && header->kind == data_plane::kMessage &&
      ParseValuesHead(absl::string_view(prefix, prefix_size), header->length, &head,
                      &data_offset)) {
    if (float* into = direct_->Claim(*this, head, header->length - data_offset)) {
      return ReceiveDirect(prefix, prefix_size, data_offset, header->length, head, into, status);
    }
  }
  std::vector<char>& bytes = received.bytes;
  bytes.resize(header->length);  // The capacity stays from update to update.
  std::memcpy(bytes.data(), prefix, prefix_size);
  if (absl::Status read =
          data_plane::ReadFull(fd_, bytes.data() + prefix_size, bytes.size() - prefix_size, what_);
      !read.ok()) {
    *status = absl::UnavailableError(read.message());
    return LaneRead::kEnded;
  }
  if (header->kind == data_plane::kStatus) {
    absl::Status ended =
        data_plane::ParseStatusPayload(absl::string_view(bytes.data(), bytes.size()));
    *status = ended.ok() ? ended
                         : absl::Status(ended.code(), absl::StrCat(what_, ": ", ended.message()));
    return LaneRead::kEnded;
  }
  *status = DecodePartitionValues(absl::string_view(bytes.data(), bytes.size()), &received,
                                  &values);
  return LaneRead::kMessage;
}

}  // namespace tributary::worker
