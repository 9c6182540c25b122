// The PS data plane's framing, shared by the worker (worker/comm/ps_client) and the
// shard (services/parameter_server/data_plane): PushPull's messages on a plain TCP
// connection, for the bulk bytes that gRPC's HTTP/2 transport moves at about half of
// what the socket can (docs/performance.md). Control stays on gRPC: a connection is
// admitted by a ticket from the authenticated OpenDataPlane RPC.
//
//   client -> shard: hello = "TRDP", version (u32), ticket (32 bytes)
//   shard -> client: a status frame (code 0: admitted; otherwise why not, then close)
//   then frames both ways: kind (u32), length (u64), payload (length bytes)
//     kMessage: a GradientPush (up) or PartitionValues (down) in protobuf wire format
//     kStatus:  the stream's end (down): code (u32, gRPC/absl numbering) + text
// Integers are little-endian. Every length is checked against a limit before any
// byte of the payload is read.
//
// The local lane: the same protocol on a Unix stream socket in Linux's abstract
// namespace, for a client in the shard's network namespace (the same host, or the
// same pod). The name travels in OpenDataPlane's answer; abstract names have no file
// permissions and another host may hold the same name, so before it sends its ticket
// the client makes the shard prove it holds it:
//   client -> shard: "TRDL", SHA-256(ticket) (32 bytes), a random challenge (32 bytes)
//   shard -> client: HMAC-SHA256(ticket, kProofLabel + challenge) (32 bytes), or a
//                    close when it issued no such ticket
// then the hello and frames as above. The proof also covers the shard's network
// namespace (LocalNamespaceId), which the client compares with its own: an accomplice
// who relays the challenge to the real shard from another host gets a proof that does
// not match there.
//
// Shared memory on the local lane (common/shared_region.h), the client's option: its
// first frame after admission may be
//   kRegion: the region's size (u64), the sendmsg carrying a sealed memfd (SCM_RIGHTS)
// answered by a status frame (OK: mapped; otherwise why not, and the lane goes on
// without it). Then either side may send a message as
//   kShared: offset, size, answer offset, answer capacity (u64 each), then the
//            message's protobuf head (every field but data, then data's tag and
//            length): its data lies in the region at [offset, offset + size).
// A push names where the shard may write its answer (a client's push and update slots
// are its own business); the shard answers there, once, when the update fits, and
// inline otherwise. Both sides check every range against the region's size.
#ifndef TRIBUTARY_COMMON_DATA_PLANE_WIRE_H_
#define TRIBUTARY_COMMON_DATA_PLANE_WIRE_H_

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tributary::data_plane {

inline constexpr char kMagic[4] = {'T', 'R', 'D', 'P'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kTicketBytes = 32;
inline constexpr size_t kHelloBytes = 4 + 4 + kTicketBytes;
inline constexpr size_t kFrameHeaderBytes = 12;
// A status frame's text is cut to this many bytes.
inline constexpr size_t kMaxStatusText = 4096;
// Bytes a message adds to its data (field tags, lengths, the job id): the frame limit
// is the partition's bytes plus this.
inline constexpr uint64_t kMessageOverheadBytes = 1024;

inline constexpr char kLocalMagic[4] = {'T', 'R', 'D', 'L'};
inline constexpr size_t kDigestBytes = 32;
inline constexpr size_t kLocalRequestBytes = 4 + kDigestBytes + kDigestBytes;
inline constexpr char kProofLabel[] = "tributary data plane local proof:";
// The local socket's name (without the abstract namespace's leading NUL): this
// prefix and 32 lowercase hex digits.
inline constexpr char kLocalNamePrefix[] = "tributary-data-plane-";

enum FrameKind : uint32_t { kMessage = 1, kStatus = 2, kShared = 3, kRegion = 4 };

// A kShared frame's fixed part, before the head; its whole payload is at most this plus
// kMessageOverheadBytes.
inline constexpr size_t kSharedPrefixBytes = 32;
struct SharedPlace {
  uint64_t offset = 0;  // The data, in the region.
  uint64_t size = 0;
  uint64_t answer_offset = 0;  // Where the answer may go (a push's; 0, 0 otherwise).
  uint64_t answer_capacity = 0;
};
std::array<char, kSharedPrefixBytes> EncodeSharedPlace(const SharedPlace& place);
SharedPlace ParseSharedPlace(const char* prefix);
// A kRegion frame announcing a region of `size` bytes (its header and payload; the
// descriptor goes with it, common/shared_region.h), and the size in such a payload.
inline constexpr size_t kRegionPayloadBytes = 8;
std::array<char, kFrameHeaderBytes + kRegionPayloadBytes> EncodeRegionOffer(uint64_t size);
uint64_t ParseRegionSize(const char (&payload)[kRegionPayloadBytes]);

struct FrameHeader {
  uint32_t kind = 0;
  uint64_t length = 0;
};

std::array<char, kFrameHeaderBytes> EncodeFrameHeader(FrameKind kind, uint64_t length);
std::array<char, kHelloBytes> EncodeHello(absl::string_view ticket);

// The ticket of a hello; INVALID_ARGUMENT for a wrong magic or version (both named).
absl::StatusOr<std::string> ParseHello(const char (&hello)[kHelloBytes]);

// Reads exactly n bytes (retrying EINTR). OUT_OF_RANGE when the peer closed before
// the first byte (a clean end), UNAVAILABLE for a close part way or a socket error
// (DEADLINE_EXCEEDED when a receive timeout ran out); `what` names the read.
absl::Status ReadFull(int fd, void* buffer, size_t n, absl::string_view what);

// ReadFull with one deadline for all of it (a peer that trickles bytes does not
// extend it): DEADLINE_EXCEEDED when it passes.
absl::Status ReadFullBefore(int fd, void* buffer, size_t n, absl::Time deadline,
                            absl::string_view what);

// Writes every byte of the pieces (sendmsg with MSG_NOSIGNAL: a closed peer is an
// error, not SIGPIPE; partial writes and EINTR continued). UNAVAILABLE on failure.
absl::Status WriteAll(int fd, iovec* pieces, int count, absl::string_view what);
// Moves *pieces and *count past `sent` bytes (a partial sendmsg).
void SkipSent(iovec** pieces, int* count, size_t sent);

// Reads a frame header: INVALID_ARGUMENT for an unknown kind or a length above
// max_length (both values named; status, shared and region frames have limits of their
// own); ReadFull's errors otherwise.
absl::StatusOr<FrameHeader> ReadFrameHeader(int fd, uint64_t max_length, absl::string_view what);
// The same checks on a header already read.
absl::StatusOr<FrameHeader> ParseFrameHeader(const char (&bytes)[kFrameHeaderBytes],
                                             uint64_t max_length, absl::string_view what);

// SHA-256(ticket) (32 bytes): how a local client names its ticket before the shard
// proved itself. Aborts the process if the digest cannot be computed: a ticket table
// keyed by an empty digest would admit any ticket.
std::string TicketDigest(absl::string_view ticket);
// HMAC-SHA256(ticket, kProofLabel + challenge + "|" + namespace_id) (32 bytes); aborts
// like TicketDigest.
std::string LocalProof(absl::string_view ticket, absl::string_view challenge,
                       absl::string_view namespace_id);
// This process's host and network namespace: the kernel's boot id and the device and
// inode of /proc/self/ns/net ("" for what cannot be read). Processes that reach each
// other's abstract sockets share it; processes on two hosts do not.
std::string LocalNamespaceId();
// Equal lengths and bytes, in time that does not depend on where they differ.
bool SameBytes(absl::string_view a, absl::string_view b);
std::array<char, kLocalRequestBytes> EncodeLocalRequest(absl::string_view ticket_digest,
                                                        absl::string_view challenge);
// The digest and challenge of a local request; INVALID_ARGUMENT for a wrong magic.
absl::Status ParseLocalRequest(const char (&request)[kLocalRequestBytes], std::string* digest,
                               std::string* challenge);

// Whether `name` is one a shard gives its local socket (kLocalNamePrefix + 32 hex).
bool IsLocalSocketName(absl::string_view name);
// A listening Unix stream socket at a fresh random abstract name (close-on-exec);
// UNAVAILABLE naming the error.
absl::StatusOr<int> ListenLocal(std::string* name);
// A connected Unix stream socket to the abstract `name` (close-on-exec), waiting at most
// `timeout`. NOT_FOUND when nothing listens there in this network namespace (another
// host: use TCP), UNAVAILABLE for the rest.
absl::StatusOr<int> ConnectLocal(absl::string_view name, absl::Duration timeout);

// A kStatus frame carrying `status` (OK included).
absl::Status WriteStatusFrame(int fd, const absl::Status& status);
// The status a kStatus payload carries; INVALID_ARGUMENT when it is malformed.
absl::Status ParseStatusPayload(absl::string_view payload);

// "host:port", "[v6]:port" or "dns:///host:port" -> host; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::string> HostOf(absl::string_view address);

// A connected TCP socket to host:port (TCP_NODELAY, close-on-exec), trying each
// address the name resolves to within `timeout`. UNAVAILABLE naming host and port.
absl::StatusOr<int> Connect(const std::string& host, int port, absl::Duration timeout);

// SO_RCVTIMEO / SO_SNDTIMEO (zero: none).
void SetReceiveTimeout(int fd, absl::Duration timeout);
void SetSendTimeout(int fd, absl::Duration timeout);

}  // namespace tributary::data_plane

#endif  // TRIBUTARY_COMMON_DATA_PLANE_WIRE_H_
