// Token streams (DatasetSpec format TOKENS): a flat .npy array of token ids, mapped
// read-only, and the dataset of its seq_len windows (dataset.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "worker/engine/dataset.h"
#include "worker/engine/npy.h"

namespace tributary::engine {

TokenStream::~TokenStream() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

void TokenStream::Copy(int64_t first, int64_t n, int64_t* out) const {
  const unsigned char* p = data_ + first * element_bytes_;
  for (int64_t i = 0; i < n; ++i, p += element_bytes_) {
    uint64_t u = 0;
    std::memcpy(&u, p, static_cast<size_t>(element_bytes_));  // Little-endian host.
    int64_t v = static_cast<int64_t>(u);
    if (is_signed_ && element_bytes_ < 8) {
      const int shift = 64 - 8 * element_bytes_;
      v = static_cast<int64_t>(u << shift) >> shift;
    }
    out[i] = v;
  }
}

absl::StatusOr<std::shared_ptr<const TokenStream>> TokenStream::Open(const std::string& path) {
  absl::StatusOr<NpyLayout> layout = ReadNpyLayout(path);
  if (!layout.ok()) return layout.status();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", what));
  };
  const std::string& descr = layout->header.descr;
  const char kind = descr.size() >= 3 ? descr[1] : '?';
  if ((kind != 'u' && kind != 'i') || (layout->element_bytes == 8 && kind == 'u')) {
    return bad(absl::StrCat("dtype '", descr,
                            "': token ids must be an integer array (uint8, uint16, int16, "
                            "uint32, int32 or int64)"));
  }
  if (layout->header.shape.size() != 1) {
    return bad(absl::StrCat("shape ", NpyShapeText(layout->header.shape),
                            ": token ids must be one flat array, shape (tokens,)"));
  }
  if (layout->header.shape[0] < 2) {
    return bad(absl::StrCat(layout->header.shape[0],
                            " tokens: a window needs at least 2 (its inputs and next ids)"));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("token file ", path, ": cannot open it: ", std::strerror(errno)));
  }
  const size_t bytes = layout->header.data_offset +
                       static_cast<size_t>(layout->header.shape[0]) * layout->element_bytes;
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (map == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("token file ", path, ": cannot map it: ", std::strerror(map_errno)));
  }
  std::shared_ptr<TokenStream> stream(new TokenStream());
  stream->path_ = path;
  stream->map_ = map;
  stream->map_bytes_ = bytes;
  stream->data_ = static_cast<const unsigned char*>(map) + layout->header.data_offset;
  stream->length_ = layout->header.shape[0];
  stream->element_bytes_ = layout->element_bytes;
  stream->is_signed_ = kind == 'i';
  // One pass over the ids (in chunks): negative ids are refused here, not mid-training,
  // and the largest tells the model's vocabulary check what it needs.
  std::vector<int64_t> chunk(1 << 16);
  int64_t largest = 0;
  for (int64_t first = 0; first < stream->length_; first += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), stream->length_ - first);
    stream->Copy(first, n, chunk.data());
    for (int64_t i = 0; i < n; ++i) {
      if (chunk[i] < 0) {
        return bad(absl::StrCat("token ", first + i, " is ", chunk[i], ": ids must be >= 0"));
      }
      largest = std::max(largest, chunk[i]);
    }
  }
  stream->max_id_ = largest;
  return std::shared_ptr<const TokenStream>(std::move(stream));
}

absl::StatusOr<Dataset> TokenWindows(std::shared_ptr<const TokenStream> stream, int64_t seq_len) {
  if (seq_len < 1 || seq_len > kMaxSeqLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len: must be in [1, ", kMaxSeqLen, "], got ", seq_len));
  }
  const int64_t windows = (stream->length() - 1) / seq_len;
  if (windows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", stream->path(), ": ", stream->length(), " tokens hold no window of ",
        seq_len + 1, " (seq_len ", seq_len, " inputs and their next ids)"));
  }
  Dataset data;
  data.source = stream->path();
  data.sample_shape = Shape{seq_len, 1, 1};
  data.sample_dims = {seq_len};
  data.feature_type = FeatureType::kInt64;
  data.target_kind = TargetKind::kInt64;
  data.target_dims = {seq_len};
  data.seq_len = seq_len;
  data.token_windows = windows;
  data.tokens = std::move(stream);
  return data;
}

}  // namespace tributary::engine
