#include "common/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_plane_wire.h"

namespace tributary {
namespace {

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status Errno(absl::string_view call) {
  return absl::UnavailableError(absl::StrCat("shared region: ", call, ": ", std::strerror(errno)));
}

}  // namespace

SharedRegion::~SharedRegion() { Release(); }

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void SharedRegion::Release() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  CloseDescriptor();
}

void SharedRegion::CloseDescriptor() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::StatusOr<SharedRegion> SharedRegion::Create(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("shared region: 0 bytes");
  SharedRegion region;
  region.fd_ = ::memfd_create("tributary-data-plane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (region.fd_ < 0) return Errno("memfd_create");
  if (::ftruncate(region.fd_, static_cast<off_t>(bytes)) != 0) {
    return Errno(absl::StrCat("ftruncate to ", bytes, " bytes"));
  }
  if (::fcntl(region.fd_, F_ADD_SEALS, kRequiredSeals) != 0) return Errno("F_ADD_SEALS");
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd_, 0);
  if (data == MAP_FAILED) return Errno(absl::StrCat("mmap of ", bytes, " bytes"));
  region.data_ = static_cast<char*>(data);
  region.size_ = bytes;
  return region;
}

absl::StatusOr<SharedRegion> SharedRegion::Map(int fd, uint64_t announced, uint64_t limit) {
  SharedRegion region;
  region.fd_ = fd;  // Closed on every return: the mapping does not need it.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    const int error = errno;
    region.CloseDescriptor();
    return absl::InvalidArgumentError(absl::StrCat(
        "shared region: the descriptor is not a sealable memfd (F_GET_SEALS: ",
        std::strerror(error), ")"));
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    region.CloseDescriptor();
    return absl::InvalidArgumentError(absl::StrCat(
        "shared region: seals 0x", absl::Hex(seals), " lack ",
        (seals & F_SEAL_SHRINK) == 0 ? "F_SEAL_SHRINK"
        : (seals & F_SEAL_GROW) == 0 ? "F_SEAL_GROW"
                                     : "F_SEAL_SEAL",
        " (a region that can change size could fault a mapping)"));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    absl::Status failed = Errno("fstat");
    region.CloseDescriptor();
    return failed;
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size != announced || size == 0 || size > limit) {
    region.CloseDescriptor();
    return absl::InvalidArgumentError(absl::StrCat("shared region: ", size,
                                                   " bytes, announced as ", announced,
                                                   "; the limit is ", limit));
  }
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  region.CloseDescriptor();
  if (data == MAP_FAILED) return Errno(absl::StrCat("mmap of ", size, " bytes"));
  region.data_ = static_cast<char*>(data);
  region.size_ = size;
  return region;
}

absl::Status WriteWithDescriptor(int socket, iovec* pieces, int count, int descriptor,
                                 absl::string_view what) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = pieces;
  message.msg_iovlen = static_cast<size_t>(count);
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
  }
  // The descriptor went with the first byte; the rest is plain.
  data_plane::SkipSent(&pieces, &count, static_cast<size_t>(sent));
  return count == 0 ? absl::OkStatus() : data_plane::WriteAll(socket, pieces, count, what);
}

absl::Status ReadWithDescriptor(int socket, void* buffer, size_t n, int* descriptor,
                                absl::string_view what) {
  *descriptor = -1;
  if (n == 0) return absl::OkStatus();
  // Room for a few descriptors: any beyond the first are closed, not leaked.
  constexpr int kRoom = 4;
  alignas(cmsghdr) char control[CMSG_SPACE(kRoom * sizeof(int))] = {};
  iovec piece = {buffer, n};
  msghdr message{};
  message.msg_iov = &piece;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (*descriptor < 0) {
        *descriptor = passed;
      } else {
        ::close(passed);
      }
    }
  }
  if (got == 0) return absl::OutOfRangeError(absl::StrCat(what, ": the peer closed"));
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": nothing received in time"));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
  }
  const size_t done = static_cast<size_t>(got);
  if (done == n) return absl::OkStatus();
  absl::Status rest =
      data_plane::ReadFull(socket, static_cast<char*>(buffer) + done, n - done, what);
  // Closed part way is not a clean end.
  return absl::IsOutOfRange(rest) ? absl::UnavailableError(rest.message()) : rest;
}

}  // namespace tributary
