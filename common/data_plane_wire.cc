#include "common/data_plane_wire.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "common/secure_random.h"

namespace tributary::data_plane {
namespace {

void Put32(char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
void Put64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
uint32_t Get32(const char* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}
uint64_t Get64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}

timeval TimevalOf(absl::Duration timeout) {
  timeval tv{};
  if (timeout > absl::ZeroDuration()) {
    tv = absl::ToTimeval(timeout);
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
  }
  return tv;
}

}  // namespace

std::array<char, kFrameHeaderBytes> EncodeFrameHeader(FrameKind kind, uint64_t length) {
  std::array<char, kFrameHeaderBytes> header;
  Put32(header.data(), kind);
  Put64(header.data() + 4, length);
  return header;
}

std::array<char, kHelloBytes> EncodeHello(absl::string_view ticket) {
  std::array<char, kHelloBytes> hello{};
  std::memcpy(hello.data(), kMagic, 4);
  Put32(hello.data() + 4, kVersion);
  std::memcpy(hello.data() + 8, ticket.data(), std::min(ticket.size(), kTicketBytes));
  return hello;
}

absl::StatusOr<std::string> ParseHello(const char (&hello)[kHelloBytes]) {
  if (std::memcmp(hello, kMagic, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data plane: the connection did not start with \"TRDP\" (first bytes 0x",
        absl::Hex(static_cast<uint8_t>(hello[0]), absl::kZeroPad2),
        absl::Hex(static_cast<uint8_t>(hello[1]), absl::kZeroPad2),
        absl::Hex(static_cast<uint8_t>(hello[2]), absl::kZeroPad2),
        absl::Hex(static_cast<uint8_t>(hello[3]), absl::kZeroPad2), ")"));
  }
  const uint32_t version = Get32(hello + 4);
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("data plane: protocol version ", version,
                                                   "; this shard speaks version ", kVersion));
  }
  return std::string(hello + 8, kTicketBytes);
}

absl::Status ReadFull(int fd, void* buffer, size_t n, absl::string_view what) {
  char* at = static_cast<char*>(buffer);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::recv(fd, at + done, n - done, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) {
      if (done == 0) return absl::OutOfRangeError(absl::StrCat(what, ": the peer closed"));
      return absl::UnavailableError(
          absl::StrCat(what, ": the peer closed after ", done, " of ", n, " bytes"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": nothing received in time"));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadFullBefore(int fd, void* buffer, size_t n, absl::Time deadline,
                            absl::string_view what) {
  char* at = static_cast<char*>(buffer);
  size_t done = 0;
  while (done < n) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": ", done, " of ", n, " bytes in time"));
    }
    pollfd waiting{fd, POLLIN, 0};
    const int ready = ::poll(&waiting, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    const ssize_t got = ::recv(fd, at + done, n - done, MSG_DONTWAIT);
    if (got > 0) {
      done += static_cast<size_t>(got);
    } else if (got == 0) {
      if (done == 0) return absl::OutOfRangeError(absl::StrCat(what, ": the peer closed"));
      return absl::UnavailableError(
          absl::StrCat(what, ": the peer closed after ", done, " of ", n, " bytes"));
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, iovec* pieces, int count, absl::string_view what) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrCat(what, ": the peer stopped reading"));
      }
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
    }
    SkipSent(&pieces, &count, static_cast<size_t>(sent));
  }
  return absl::OkStatus();
}

void SkipSent(iovec** pieces, int* count, size_t sent) {
  while (*count > 0 && sent >= (*pieces)->iov_len) {
    sent -= (*pieces)->iov_len;
    ++*pieces;
    --*count;
  }
  if (*count > 0) {
    (*pieces)->iov_base = static_cast<char*>((*pieces)->iov_base) + sent;
    (*pieces)->iov_len -= sent;
  }
}

absl::StatusOr<FrameHeader> ReadFrameHeader(int fd, uint64_t max_length, absl::string_view what) {
  char bytes[kFrameHeaderBytes];
  if (absl::Status read = ReadFull(fd, bytes, sizeof(bytes), what); !read.ok()) return read;
  return ParseFrameHeader(bytes, max_length, what);
}

absl::StatusOr<FrameHeader> ParseFrameHeader(const char (&bytes)[kFrameHeaderBytes],
                                             uint64_t max_length, absl::string_view what) {
  FrameHeader header;
  header.kind = Get32(bytes);
  header.length = Get64(bytes + 4);
  uint64_t limit = max_length;
  switch (header.kind) {
    case kMessage: break;
    case kStatus: limit = 4 + kMaxStatusText; break;
    case kShared: limit = kSharedPrefixBytes + kMessageOverheadBytes; break;
    case kRegion: limit = kRegionPayloadBytes; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": unknown frame kind ", header.kind,
          " (1: message, 2: status, 3: shared, 4: region)"));
  }
  if (header.length > limit) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a frame of ", header.length,
                                                   " bytes; the limit is ", limit));
  }
  return header;
}

std::array<char, kSharedPrefixBytes> EncodeSharedPlace(const SharedPlace& place) {
  std::array<char, kSharedPrefixBytes> bytes;
  Put64(bytes.data(), place.offset);
  Put64(bytes.data() + 8, place.size);
  Put64(bytes.data() + 16, place.answer_offset);
  Put64(bytes.data() + 24, place.answer_capacity);
  return bytes;
}

std::array<char, kFrameHeaderBytes + kRegionPayloadBytes> EncodeRegionOffer(uint64_t size) {
  std::array<char, kFrameHeaderBytes + kRegionPayloadBytes> bytes;
  const auto header = EncodeFrameHeader(kRegion, kRegionPayloadBytes);
  std::copy(header.begin(), header.end(), bytes.begin());
  Put64(bytes.data() + kFrameHeaderBytes, size);
  return bytes;
}

uint64_t ParseRegionSize(const char (&payload)[kRegionPayloadBytes]) { return Get64(payload); }

SharedPlace ParseSharedPlace(const char* prefix) {
  SharedPlace place;
  place.offset = Get64(prefix);
  place.size = Get64(prefix + 8);
  place.answer_offset = Get64(prefix + 16);
  place.answer_capacity = Get64(prefix + 24);
  return place;
}

absl::Status WriteStatusFrame(int fd, const absl::Status& status) {
  std::string payload(4, '\0');
  Put32(payload.data(), static_cast<uint32_t>(status.code()));
  absl::string_view text = status.message();
  text = text.substr(0, kMaxStatusText);
  payload.append(text.data(), text.size());
  const auto header = EncodeFrameHeader(kStatus, payload.size());
  iovec pieces[2] = {{const_cast<char*>(header.data()), header.size()},
                     {payload.data(), payload.size()}};
  return WriteAll(fd, pieces, 2, "data plane status");
}

absl::Status ParseStatusPayload(absl::string_view payload) {
  if (payload.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: a status frame of ", payload.size(), " bytes (at least 4)"));
  }
  const uint32_t code = Get32(payload.data());
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: a status frame with unknown code ", code));
  }
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), payload.substr(4));
}

absl::StatusOr<std::string> HostOf(absl::string_view address) {
  absl::string_view rest = address;
  if (absl::StartsWith(rest, "dns:///")) rest.remove_prefix(7);
  if (absl::StartsWith(rest, "ipv4:")) rest.remove_prefix(5);
  if (absl::StartsWith(rest, "ipv6:")) rest.remove_prefix(5);
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: no host:port in the shard address \"", address, "\""));
  }
  absl::string_view host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::string(host);
}

absl::StatusOr<int> Connect(const std::string& host, int port, absl::Duration timeout) {
  const std::string where = absl::StrCat(host, ":", port);
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("data plane: port ", port, " of ", host));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int error = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane: cannot resolve ", host, ": ", ::gai_strerror(error)));
  }
  const absl::Time give_up = absl::Now() + timeout;
  std::string last_error = "no address";
  int connected = -1;
  for (addrinfo* at = found; at != nullptr && connected < 0; at = at->ai_next) {
    const int fd = ::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            at->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int result = ::connect(fd, at->ai_addr, at->ai_addrlen);
    if (result != 0 && errno == EINPROGRESS) {
      pollfd waiting{fd, POLLOUT, 0};
      const int64_t left_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(give_up - absl::Now()));
      int ready;
      do {
        ready = ::poll(&waiting, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
      } while (ready < 0 && errno == EINTR);
      if (ready == 1) {
        int error = 0;
        socklen_t length = sizeof(error);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        result = error == 0 ? 0 : -1;
        errno = error;
      } else {
        result = -1;
        errno = ready == 0 ? ETIMEDOUT : errno;
      }
    }
    if (result != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connected = fd;
  }
  ::freeaddrinfo(found);
  if (connected < 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane: cannot connect to ", where, ": ", last_error));
  }
  return connected;
}

std::string TicketDigest(absl::string_view ticket) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(ticket.data(), ticket.size(), digest, &size, EVP_sha256(), nullptr) != 1 ||
      size != kDigestBytes) {
    LOG(FATAL) << "data plane: SHA-256 failed (OpenSSL)";
  }
  return std::string(reinterpret_cast<char*>(digest), size);
}

std::string LocalProof(absl::string_view ticket, absl::string_view challenge,
                       absl::string_view namespace_id) {
  const std::string message = absl::StrCat(kProofLabel, challenge, "|", namespace_id);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), ticket.data(), static_cast<int>(ticket.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &size) == nullptr ||
      size != kDigestBytes) {
    LOG(FATAL) << "data plane: HMAC-SHA256 failed (OpenSSL)";
  }
  return std::string(reinterpret_cast<char*>(mac), size);
}

std::string LocalNamespaceId() {
  std::string boot_id;
  if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char line[64] = {};
    if (std::fgets(line, sizeof(line), file) != nullptr) {
      boot_id = std::string(absl::StripAsciiWhitespace(line));
    }
    std::fclose(file);
  }
  struct stat net {};
  std::string netns;
  if (::stat("/proc/self/ns/net", &net) == 0) {
    netns = absl::StrCat(static_cast<uint64_t>(net.st_dev), ":",
                         static_cast<uint64_t>(net.st_ino));
  }
  return absl::StrCat(boot_id, "/", netns);
}

bool SameBytes(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::array<char, kLocalRequestBytes> EncodeLocalRequest(absl::string_view ticket_digest,
                                                        absl::string_view challenge) {
  std::array<char, kLocalRequestBytes> request{};
  std::memcpy(request.data(), kLocalMagic, 4);
  std::memcpy(request.data() + 4, ticket_digest.data(),
              std::min(ticket_digest.size(), kDigestBytes));
  std::memcpy(request.data() + 4 + kDigestBytes, challenge.data(),
              std::min(challenge.size(), kDigestBytes));
  return request;
}

absl::Status ParseLocalRequest(const char (&request)[kLocalRequestBytes], std::string* digest,
                               std::string* challenge) {
  if (std::memcmp(request, kLocalMagic, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data plane: the local connection did not start with \"TRDL\" (first bytes 0x",
        absl::BytesToHexString(absl::string_view(request, 4)), ")"));
  }
  digest->assign(request + 4, kDigestBytes);
  challenge->assign(request + 4 + kDigestBytes, kDigestBytes);
  return absl::OkStatus();
}

bool IsLocalSocketName(absl::string_view name) {
  if (!absl::StartsWith(name, kLocalNamePrefix)) return false;
  const absl::string_view hex = name.substr(sizeof(kLocalNamePrefix) - 1);
  return hex.size() == 32 && std::all_of(hex.begin(), hex.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

namespace {

// The address of the abstract `name`: sun_path starts with a NUL.
socklen_t AbstractAddress(absl::string_view name, sockaddr_un* address) {
  *address = sockaddr_un{};
  address->sun_family = AF_UNIX;
  const size_t size = std::min(name.size(), sizeof(address->sun_path) - 1);
  std::memcpy(address->sun_path + 1, name.data(), size);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + size);
}

}  // namespace

absl::StatusOr<int> ListenLocal(std::string* name) {
  absl::StatusOr<std::string> random = SecureRandomBytes(16);
  if (!random.ok()) {
    return absl::UnavailableError(
        absl::StrCat("data plane local socket: ", random.status().message()));
  }
  const std::string chosen = absl::StrCat(kLocalNamePrefix, absl::BytesToHexString(*random));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane local socket: socket: ", std::strerror(errno)));
  }
  sockaddr_un address;
  const socklen_t length = AbstractAddress(chosen, &address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, 128) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("data plane local socket: cannot listen on @", chosen, ": ", error));
  }
  *name = chosen;
  return fd;
}

absl::StatusOr<int> ConnectLocal(absl::string_view name, absl::Duration timeout) {
  if (!IsLocalSocketName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: \"", absl::CHexEscape(name.substr(0, 64)),
                     "\" is not a local socket name"));
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane: local socket: ", std::strerror(errno)));
  }
  // A Unix socket's connect waits for room in a full backlog up to the send timeout.
  SetSendTimeout(fd, timeout);
  sockaddr_un address;
  const socklen_t length = AbstractAddress(name, &address);
  int result;
  do {
    result = ::connect(fd, reinterpret_cast<sockaddr*>(&address), length);
  } while (result != 0 && errno == EINTR);
  if (result != 0) {
    const int error = errno;
    ::close(fd);
    const std::string message =
        absl::StrCat("data plane: cannot connect to @", name, ": ", std::strerror(error));
    if (error == ECONNREFUSED || error == ENOENT) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  SetSendTimeout(fd, absl::ZeroDuration());
  return fd;
}

void SetReceiveTimeout(int fd, absl::Duration timeout) {
  const timeval tv = TimevalOf(timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

void SetSendTimeout(int fd, absl::Duration timeout) {
  const timeval tv = TimevalOf(timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace tributary::data_plane
