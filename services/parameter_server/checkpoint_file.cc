#include "services/parameter_server/checkpoint_file.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/parameter_server/crc32c.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files store little-endian floats as they are in memory");

namespace tributary::ps {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "TRBPSCK1";
constexpr char kEndMagic[] = "TRBPSEND";
constexpr size_t kHeaderBytes = 24;
constexpr size_t kTrailerBytes = 12;
constexpr uint32_t kFormatVersion = 1;
constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".tpc";

std::string ErrnoText(int error) { return std::strerror(error); }

void PutU64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
}

uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return value;
}

// Writes everything, folding it into the running CRC.
class ChecksummedWriter {
 public:
  ChecksummedWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  absl::Status Write(const void* data, size_t size, bool checksum = true) {
    if (checksum) crc_ = Crc32cExtend(crc_, data, size);
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::write(fd_, p, size);
      if (written < 0) {
        if (errno == EINTR) continue;
        return absl::InternalError(
            absl::StrCat("writing checkpoint ", path_, ": ", ErrnoText(errno)));
      }
      p += written;
      size -= static_cast<size_t>(written);
      bytes_ += static_cast<uint64_t>(written);
    }
    return absl::OkStatus();
  }

  uint32_t crc() const { return crc_; }
  uint64_t bytes() const { return bytes_; }

 private:
  int fd_;
  std::string path_;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("opening ", dir, ": ", ErrnoText(errno)));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) return absl::InternalError(absl::StrCat("fsync ", dir, ": ", ErrnoText(error)));
  return absl::OkStatus();
}

absl::Status ReadFully(int fd, const std::string& path, uint64_t offset, void* out, size_t size) {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("reading ", path, ": ", ErrnoText(errno)));
    }
    if (got == 0) return absl::DataLossError(absl::StrCat(path, ": truncated at byte ", offset));
    p += got;
    size -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

bool IsCheckpointName(const std::string& name) {
  return absl::StartsWith(name, kPrefix) && absl::EndsWith(name, kSuffix);
}

uint64_t BodyBytesOf(const CheckpointMeta& meta) {
  uint64_t bytes = 0;
  for (const PartitionCheckpoint& partition : meta.partitions()) {
    bytes += static_cast<uint64_t>(partition.length()) * (1 + partition.state_slots()) * 4;
  }
  return bytes;
}

}  // namespace

std::string ShardDirectory(const std::string& dir, uint32_t shard) {
  return absl::StrCat(dir, "/shard-", shard);
}

absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const std::string& shard_dir,
                                                  const ShardCheckpoint& checkpoint) {
  CheckpointMeta meta = checkpoint.meta;
  meta.set_format_version(kFormatVersion);
  if (static_cast<size_t>(meta.partitions_size()) != checkpoint.partitions.size()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint meta lists ", meta.partitions_size(),
                                                   " partitions, data has ",
                                                   checkpoint.partitions.size()));
  }
  for (int i = 0; i < meta.partitions_size(); ++i) {
    const PartitionCheckpoint& info = meta.partitions(i);
    const PartitionData& data = checkpoint.partitions[i];
    const size_t floats = static_cast<size_t>(info.length());
    if (data.values == nullptr || data.values->data().size() != floats * 4 ||
        data.state.size() != floats * info.state_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint partition ", info.id(),
                                                     ": data does not match length ", info.length(),
                                                     " with ", info.state_slots(), " state slots"));
    }
  }

  std::error_code error;
  fs::create_directories(shard_dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("creating ", shard_dir, ": ", error.message()));
  }
  const std::string name = absl::StrFormat("%s%016d-step-%012d%s", kPrefix,
                                           meta.written_unix_micros(), meta.step(), kSuffix);
  const std::string path = absl::StrCat(shard_dir, "/", name);
  const std::string temp = absl::StrCat(shard_dir, "/.", name, ".tmp");

  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("creating ", temp, ": ", ErrnoText(errno)));
  auto fail = [&](absl::Status status) {
    ::close(fd);
    ::unlink(temp.c_str());
    return status;
  };

  const std::string meta_bytes = meta.SerializeAsString();
  char header[kHeaderBytes];
  std::memcpy(header, kMagic, 8);
  PutU64(header + 8, meta_bytes.size());
  PutU64(header + 16, BodyBytesOf(meta));
  ChecksummedWriter writer(fd, temp);
  absl::Status status = writer.Write(header, sizeof(header));
  if (status.ok()) status = writer.Write(meta_bytes.data(), meta_bytes.size());
  for (size_t i = 0; status.ok() && i < checkpoint.partitions.size(); ++i) {
    const PartitionData& data = checkpoint.partitions[i];
    status = writer.Write(data.values->data().data(), data.values->data().size());
    if (status.ok() && !data.state.empty()) {
      status = writer.Write(data.state.data(), data.state.size() * sizeof(float));
    }
  }
  char trailer[kTrailerBytes];
  const uint32_t crc = writer.crc();
  for (int i = 0; i < 4; ++i) trailer[i] = static_cast<char>(crc >> (8 * i));
  std::memcpy(trailer + 4, kEndMagic, 8);
  if (status.ok()) status = writer.Write(trailer, sizeof(trailer), /*checksum=*/false);
  if (!status.ok()) return fail(status);
  if (::fsync(fd) != 0) {
    return fail(absl::InternalError(absl::StrCat("fsync ", temp, ": ", ErrnoText(errno))));
  }
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("closing ", temp, ": ", ErrnoText(errno)));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("renaming ", temp, " to ", path, ": ", ErrnoText(rename_error)));
  }
  if (absl::Status synced = FsyncDirectory(shard_dir); !synced.ok()) return synced;
  return WrittenCheckpoint{path, writer.bytes(), crc};
}

absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return error == ENOENT
               ? absl::NotFoundError(absl::StrCat(path, ": no such file"))
               : absl::InternalError(absl::StrCat("opening ", path, ": ", ErrnoText(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    return absl::InternalError(absl::StrCat("stat ", path, ": ", ErrnoText(errno)));
  }
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < kHeaderBytes + kTrailerBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated (", file_size, " bytes, shorter than header + trailer)"));
  }
  char header[kHeaderBytes];
  if (absl::Status read = ReadFully(fd, path, 0, header, sizeof(header)); !read.ok()) return read;
  if (std::memcmp(header, kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a Tributary PS checkpoint (bad magic)"));
  }
  const uint64_t meta_len = GetU64(header + 8);
  const uint64_t body_len = GetU64(header + 16);
  const uint64_t expected = kHeaderBytes + meta_len + body_len + kTrailerBytes;
  if (meta_len > file_size || body_len > file_size || expected != file_size) {
    return absl::DataLossError(absl::StrCat(path, ": torn or truncated (", file_size,
                                            " bytes, header says ", expected, ")"));
  }
  char trailer[kTrailerBytes];
  if (absl::Status read = ReadFully(fd, path, file_size - kTrailerBytes, trailer, kTrailerBytes);
      !read.ok()) {
    return read;
  }
  if (std::memcmp(trailer + 4, kEndMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": torn (end marker missing)"));
  }
  uint32_t stored_crc = 0;
  for (int i = 0; i < 4; ++i)
    stored_crc |= static_cast<uint32_t>(static_cast<uint8_t>(trailer[i])) << (8 * i);

  std::string meta_bytes(meta_len, '\0');
  if (absl::Status read = ReadFully(fd, path, kHeaderBytes, meta_bytes.data(), meta_len);
      !read.ok()) {
    return read;
  }
  uint32_t crc = Crc32cExtend(0, header, sizeof(header));
  crc = Crc32cExtend(crc, meta_bytes.data(), meta_bytes.size());

  ShardCheckpoint checkpoint;
  // Parse only after the checksum agrees would need a second pass over a large body;
  // a meta that does not parse or disagrees with body_len is reported as corruption.
  if (!checkpoint.meta.ParseFromString(meta_bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": metadata does not parse (corrupt)"));
  }
  if (checkpoint.meta.format_version() != kFormatVersion) {
    return absl::DataLossError(absl::StrCat(path, ": format version ",
                                            checkpoint.meta.format_version(), ", expected ",
                                            kFormatVersion));
  }
  for (const PartitionCheckpoint& info : checkpoint.meta.partitions()) {
    // Bound each term before summing so corrupt metadata cannot overflow the total.
    if (info.length() < 0 || static_cast<uint64_t>(info.length()) > body_len / 4 ||
        info.state_slots() > 8) {
      return absl::DataLossError(absl::StrCat(path, ": partition ", info.id(), " has length ",
                                              info.length(), " and ", info.state_slots(),
                                              " state slots (corrupt)"));
    }
  }
  if (BodyBytesOf(checkpoint.meta) != body_len) {
    return absl::DataLossError(absl::StrCat(path, ": metadata describes ",
                                            BodyBytesOf(checkpoint.meta),
                                            " body bytes, header says ", body_len, " (corrupt)"));
  }
  uint64_t offset = kHeaderBytes + meta_len;
  checkpoint.partitions.reserve(checkpoint.meta.partitions_size());
  for (const PartitionCheckpoint& info : checkpoint.meta.partitions()) {
    const size_t floats = static_cast<size_t>(info.length());
    auto values = std::make_shared<v1::PartitionValues>();
    values->set_partition_id(info.id());
    values->set_dtype(v1::FLOAT32);
    values->set_version(info.version());
    values->set_step(info.step());
    std::string* data = values->mutable_data();
    data->resize(floats * 4);
    if (absl::Status read = ReadFully(fd, path, offset, data->data(), data->size()); !read.ok()) {
      return read;
    }
    crc = Crc32cExtend(crc, data->data(), data->size());
    offset += data->size();
    PartitionData partition;
    partition.values = std::move(values);
    partition.state.resize(floats * info.state_slots());
    const size_t state_bytes = partition.state.size() * sizeof(float);
    if (state_bytes > 0) {
      if (absl::Status read = ReadFully(fd, path, offset, partition.state.data(), state_bytes);
          !read.ok()) {
        return read;
      }
      crc = Crc32cExtend(crc, partition.state.data(), state_bytes);
      offset += state_bytes;
    }
    checkpoint.partitions.push_back(std::move(partition));
  }
  if (crc != stored_crc) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (stored ",
                                            Crc32cHex(stored_crc), ", computed ", Crc32cHex(crc),
                                            ")"));
  }
  return checkpoint;
}

std::vector<std::string> ListCheckpoints(const std::string& shard_dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(shard_dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (IsCheckpointName(name)) names.push_back(name);
  }
  // Zero-padded times make name order time order.
  std::sort(names.rbegin(), names.rend());
  std::vector<std::string> paths;
  paths.reserve(names.size());
  for (const std::string& name : names) paths.push_back(absl::StrCat(shard_dir, "/", name));
  return paths;
}

std::optional<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& shard_dir,
                                                     std::vector<std::string>* skipped) {
  std::error_code error;
  for (fs::directory_iterator it(shard_dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (absl::StartsWith(name, ".ckpt-") && absl::EndsWith(name, ".tmp")) {
      LOG(WARNING) << "removing unfinished checkpoint temp file " << it->path().string();
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    absl::StatusOr<ShardCheckpoint> checkpoint = ReadCheckpoint(path);
    if (checkpoint.ok()) return LoadedCheckpoint{path, *std::move(checkpoint)};
    LOG(ERROR) << "skipping checkpoint " << path << ": " << checkpoint.status();
    if (skipped != nullptr) skipped->push_back(std::string(checkpoint.status().message()));
  }
  return std::nullopt;
}

void PruneCheckpoints(const std::string& shard_dir, int keep) {
  const std::vector<std::string> paths = ListCheckpoints(shard_dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < paths.size(); ++i) {
    std::error_code error;
    fs::remove(paths[i], error);
    if (error)
      LOG(WARNING) << "cannot remove old checkpoint " << paths[i] << ": " << error.message();
  }
}

std::vector<uint32_t> ShardsWithCheckpoints(const std::string& dir) {
  std::vector<uint32_t> shards;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    uint32_t shard = 0;
    if (!absl::StartsWith(name, "shard-") || !absl::SimpleAtoi(name.substr(6), &shard)) continue;
    if (!ListCheckpoints(it->path().string()).empty()) shards.push_back(shard);
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

}  // namespace tributary::ps
