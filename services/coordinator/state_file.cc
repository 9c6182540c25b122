#include "services/coordinator/state_file.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tributary::coordinator {
namespace {

constexpr char kMagic[] = "tributary-coordinator-state";
constexpr char kFormat[] = "v1";

uint32_t Crc32(const std::string& bytes) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags);
  if (fd < 0) return ErrnoError("cannot open", path);
  const int result = fsync(fd);
  close(fd);
  if (result != 0) return ErrnoError("cannot fsync", path);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoError("cannot open", path);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return ErrnoError("cannot read", path);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return std::optional<std::string>(std::move(bytes));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 const std::string& bytes) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("cannot create directory", dir);
  }
  const std::string temp = path + ".tmp";
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  absl::Status written = WriteAll(fd, bytes, temp);
  if (written.ok() && fsync(fd) != 0) written = ErrnoError("cannot fsync", temp);
  close(fd);
  if (!written.ok()) return written;
  if (std::rename(temp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename to", path);
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  return ReadFile(path);
}

StateFile::StateFile(std::string dir)
    : dir_(std::move(dir)),
      path_(dir_ + "/coordinator_state.json"),
      previous_path_(dir_ + "/coordinator_state.prev.json") {}

absl::StatusOr<std::string> StateFile::Encode(const CoordinatorState& state) {
  std::string body;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  const auto printed = google::protobuf::util::MessageToJsonString(state, &body, options);
  if (!printed.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the coordinator state: ", printed.ToString()));
  }
  return absl::StrFormat("%s %s bytes=%d crc32=%08x\n", kMagic, kFormat, body.size(), Crc32(body)) +
         body;
}

absl::StatusOr<CoordinatorState> StateFile::Decode(const std::string& name,
                                                   const std::string& bytes) {
  const size_t newline = bytes.find('\n');
  if (newline == std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("state file ", name, " is torn: no header line (", bytes.size(), " bytes)"));
  }
  const std::string header = bytes.substr(0, newline);
  const std::string body = bytes.substr(newline + 1);
  const std::vector<std::string> fields = absl::StrSplit(header, ' ');
  uint64_t length = 0;
  uint32_t checksum = 0;
  if (fields.size() != 4 || fields[0] != kMagic || fields[1] != kFormat ||
      !absl::StartsWith(fields[2], "bytes=") || !absl::StartsWith(fields[3], "crc32=") ||
      !absl::SimpleAtoi(fields[2].substr(6), &length) ||
      !absl::SimpleHexAtoi(fields[3].substr(6), &checksum)) {
    return absl::DataLossError(
        absl::StrCat("state file ", name, " has a bad header '", header.substr(0, 120), "'"));
  }
  if (body.size() != length) {
    return absl::DataLossError(absl::StrCat("state file ", name, " is torn: header says ", length,
                                            " body bytes, file holds ", body.size()));
  }
  const uint32_t actual = Crc32(body);
  if (actual != checksum) {
    return absl::DataLossError(
        absl::StrFormat("state file %s is corrupt: CRC-32 of the body is %08x, header says %08x",
                        name, actual, checksum));
  }
  CoordinatorState state;
  const auto parsed = google::protobuf::util::JsonStringToMessage(body, &state);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(
        "state file ", name, " does not hold a coordinator state: ", parsed.ToString()));
  }
  if (state.format_version() != 1) {
    return absl::DataLossError(absl::StrCat("state file ", name, " has format_version ",
                                            state.format_version(), "; this build reads 1"));
  }
  return state;
}

absl::Status StateFile::Save(const CoordinatorState& state) const {
  absl::StatusOr<std::string> bytes = Encode(state);
  if (!bytes.ok()) return bytes.status();
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("cannot create state directory", dir_);
  }
  const std::string temp = path_ + ".tmp";
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  absl::Status written = WriteAll(fd, *bytes, temp);
  if (written.ok() && fsync(fd) != 0) written = ErrnoError("cannot fsync", temp);
  close(fd);
  if (!written.ok()) return written;
  // Keep the version being replaced: a hard link survives the rename below.
  const std::string previous_temp = previous_path_ + ".tmp";
  unlink(previous_temp.c_str());
  if (link(path_.c_str(), previous_temp.c_str()) == 0) {
    if (std::rename(previous_temp.c_str(), previous_path_.c_str()) != 0) {
      return ErrnoError("cannot rename to", previous_path_);
    }
  } else if (errno != ENOENT) {
    return ErrnoError("cannot keep the previous state file", previous_path_);
  }
  if (std::rename(temp.c_str(), path_.c_str()) != 0) return ErrnoError("cannot rename to", path_);
  return FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::optional<StateFile::Loaded>> StateFile::Load() const {
  absl::StatusOr<std::optional<std::string>> current = ReadFile(path_);
  if (!current.ok()) return current.status();
  absl::StatusOr<std::optional<std::string>> previous = ReadFile(previous_path_);
  if (!previous.ok()) return previous.status();
  if (!current->has_value() && !previous->has_value()) return std::optional<Loaded>();

  std::string problem;
  if (current->has_value()) {
    absl::StatusOr<CoordinatorState> state = Decode(path_, **current);
    if (state.ok()) return std::optional<Loaded>(Loaded{*std::move(state), path_, ""});
    problem = std::string(state.status().message());
    const std::string aside = path_ + ".corrupt";
    if (std::rename(path_.c_str(), aside.c_str()) == 0) {
      absl::StrAppend(&problem, " (moved to ", aside, ")");
    }
  } else {
    problem = absl::StrCat("state file ", path_, " is missing");
  }
  if (!previous->has_value()) {
    return absl::DataLossError(
        absl::StrCat(problem, "; no previous version ", previous_path_,
                     " to fall back to. Remove the state directory's files to start fresh."));
  }
  absl::StatusOr<CoordinatorState> fallback = Decode(previous_path_, **previous);
  if (!fallback.ok()) {
    return absl::DataLossError(absl::StrCat(
        problem, "; the previous version is unusable too: ", fallback.status().message(),
        ". Remove the state directory's files to start fresh."));
  }
  return std::optional<Loaded>(
      Loaded{*std::move(fallback), previous_path_,
             absl::StrCat(problem, "; using the previous version ", previous_path_)});
}

}  // namespace tributary::coordinator
