// Memory shared by a worker and a PS shard on the same host: the data plane's local
// lane (common/data_plane_wire.h) can carry a push's and an update's bytes through it
// instead of through the socket, which then carries only the messages' heads. On a
// 2-core host a 470 KB message written into a Unix socket moves in ~212 KB pieces, each
// a wake-up of the reader; through the region it is one memcpy.
//
// The worker makes the region (memfd_create), seals it against shrinking and growing
// (so that no access through a mapping can fault: SIGBUS on a truncated file) and hands
// its descriptor to the shard over the local socket (SCM_RIGHTS). The shard maps it only
// when the seals are there and the size is the one announced and within its limit. The
// region holds nothing but bytes each side copies in or reads: offsets and sizes come in
// the frames and are checked against the region's size before any access.
//
//   SharedRegion region = *SharedRegion::Create(bytes);           // worker
//   WriteWithDescriptor(socket, pieces, 2, region.fd(), "...");   // with the announcement
//   SharedRegion mapped = *SharedRegion::Map(fd, bytes, limit);    // shard
#ifndef TRIBUTARY_COMMON_SHARED_REGION_H_
#define TRIBUTARY_COMMON_SHARED_REGION_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tributary {

class SharedRegion {
 public:
  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // A fresh sealed memfd of `bytes` (> 0), mapped read-write; its descriptor stays open
  // (close-on-exec) until CloseDescriptor. UNAVAILABLE naming the call that failed.
  static absl::StatusOr<SharedRegion> Create(size_t bytes);

  // Maps the region behind `fd` (which it closes, mapped or not) read-write. Refused
  // with INVALID_ARGUMENT naming what is wrong: not a memfd, F_SEAL_SHRINK, F_SEAL_GROW
  // or F_SEAL_SEAL missing, a size other than `announced`, or above `limit`.
  static absl::StatusOr<SharedRegion> Map(int fd, uint64_t announced, uint64_t limit);

  char* data() const { return data_; }
  size_t size() const { return size_; }
  bool mapped() const { return data_ != nullptr; }
  int fd() const { return fd_; }
  // Closes the descriptor (the mapping stays): after it was handed over.
  void CloseDescriptor();

  // Whether [offset, offset + size) lies inside the region (no overflow for any input).
  bool Holds(uint64_t offset, uint64_t size) const {
    return offset <= size_ && size <= size_ - offset;
  }

 private:
  void Release();

  char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

// Writes every byte of the pieces like data_plane::WriteAll, the first sendmsg carrying
// `descriptor` (SCM_RIGHTS). UNAVAILABLE on failure, naming `what`.
absl::Status WriteWithDescriptor(int socket, iovec* pieces, int count, int descriptor,
                                 absl::string_view what);

// Reads exactly n bytes like data_plane::ReadFull and, in *descriptor, the one
// descriptor the peer sent with them (-1: none; any others it sent are closed). The
// caller owns *descriptor, also when an error is returned.
absl::Status ReadWithDescriptor(int socket, void* buffer, size_t n, int* descriptor,
                                absl::string_view what);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SHARED_REGION_H_
