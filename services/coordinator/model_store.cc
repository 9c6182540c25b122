#include "services/coordinator/model_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = absl::StrCat(path, ".tmp-", getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", temporary, ": ", std::strerror(errno)));
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(temporary.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", temporary, ": ", why));
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", temporary, ": ", why));
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", temporary, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTorchScriptArchive(const std::string& file_name, const std::string& bytes) {
  // A zip archive begins with a local file header; torch.jit.save's holds these
  // entries (their names also sit in the central directory at the end).
  if (bytes.size() < 4 || bytes.compare(0, 4, "PK\x03\x04", 4) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model file ", file_name,
                     ": not a TorchScript archive (no zip header): save the model with "
                     "torch.jit.script(model).save(path), not torch.save(model.state_dict())"));
  }
  if (!absl::StrContains(bytes, "/data.pkl") || !absl::StrContains(bytes, "/version")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file ", file_name,
        ": a zip archive but not a TorchScript one (no data.pkl and version entries): save "
        "the model with torch.jit.script(model).save(path)"));
  }
  return absl::OkStatus();
}

ModelStore::ModelStore(ModelStoreOptions options) : options_(std::move(options)) {}

std::string ModelStore::PathOf(const std::string& sha256) const {
  return absl::StrCat(options_.directory, "/", sha256, ".pt");
}

absl::Status ModelStore::Open() {
  if (options_.directory.empty()) return absl::OkStatus();
  if (mkdir(options_.directory.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("model directory ", options_.directory,
                                            ": cannot create it: ", std::strerror(errno)));
  }
  DIR* dir = opendir(options_.directory.c_str());
  if (dir == nullptr) {
    return absl::InternalError(absl::StrCat("model directory ", options_.directory,
                                            ": cannot read it: ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() != 64 + 3 || !absl::EndsWith(name, ".pt")) continue;
    const std::string sha256 = name.substr(0, 64);
    if (!IsSha256Hex(sha256)) continue;
    struct stat st;
    if (stat(PathOf(sha256).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    sizes_[sha256] = st.st_size;
    stored_bytes_ += st.st_size;
  }
  closedir(dir);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelStore::Upload>> ModelStore::StartUpload() {
  absl::MutexLock lock(&mu_);
  if (uploads_ >= options_.max_concurrent_uploads) {
    return absl::ResourceExhaustedError(
        absl::StrCat("UploadModel: ", uploads_,
                     " uploads are under way, the most this "
                     "coordinator takes at once; retry when they are done"));
  }
  ++uploads_;
  return std::unique_ptr<Upload>(new Upload(this));
}

void ModelStore::UploadEnded() {
  absl::MutexLock lock(&mu_);
  --uploads_;
}

ModelStore::Upload::~Upload() { store_->UploadEnded(); }

absl::Status ModelStore::Upload::Header(const v1::ModelFileHeader& header) {
  if (have_header_) return absl::InvalidArgumentError("UploadModel: a second header");
  const std::string& name = header.file_name();
  if (!IsModelFileName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("UploadModel: file_name '", absl::CHexEscape(name.substr(0, 300)),
                     "' must be 1-255 printable ASCII characters without '/'"));
  }
  if (!IsSha256Hex(header.sha256())) {
    return absl::InvalidArgumentError(absl::StrCat("UploadModel: model file ", name, ": sha256 '",
                                                   absl::CHexEscape(header.sha256().substr(0, 100)),
                                                   "' is not 64 lowercase hex digits"));
  }
  if (header.size_bytes() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("UploadModel: model file ", name, ": size_bytes is 0"));
  }
  if (header.size_bytes() > static_cast<uint64_t>(store_->options_.max_model_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("UploadModel: model file ", name, " has ", header.size_bytes(),
                     " bytes, more than this coordinator's --max_model_bytes (",
                     store_->options_.max_model_bytes, ")"));
  }
  header_ = header;
  have_header_ = true;
  bytes_.reserve(static_cast<size_t>(header.size_bytes()));
  return absl::OkStatus();
}

absl::Status ModelStore::Upload::Chunk(const std::string& bytes) {
  if (!have_header_) {
    return absl::InvalidArgumentError("UploadModel: the first message must be the header");
  }
  if (bytes_.size() + bytes.size() > header_.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("UploadModel: model file ", header_.file_name(),
                                                   ": more than the ", header_.size_bytes(),
                                                   " bytes its header announced"));
  }
  bytes_.append(bytes);
  hash_.Update(bytes);
  return absl::OkStatus();
}

absl::StatusOr<v1::UploadModelResponse> ModelStore::Upload::Finish() {
  if (!have_header_) {
    return absl::InvalidArgumentError("UploadModel: the stream ended before a header");
  }
  if (finished_) return absl::FailedPreconditionError("UploadModel: finished twice");
  finished_ = true;
  const std::string& name = header_.file_name();
  if (bytes_.size() != header_.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("UploadModel: model file ", name, ": got ",
                                                   bytes_.size(), " bytes of the ",
                                                   header_.size_bytes(), " announced"));
  }
  const std::string digest = hash_.HexDigest();
  if (digest != header_.sha256()) {
    return absl::InvalidArgumentError(absl::StrCat("UploadModel: model file ", name,
                                                   ": its bytes have SHA-256 ", digest,
                                                   ", the header says ", header_.sha256()));
  }
  if (absl::Status archive = CheckTorchScriptArchive(name, bytes_); !archive.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("UploadModel: ", archive.message()));
  }
  v1::UploadModelResponse response;
  response.set_sha256(digest);
  response.set_size_bytes(bytes_.size());
  if (store_->Size(digest).ok()) {
    response.set_already_stored(true);
    return response;
  }
  if (absl::Status stored = store_->Store(digest, bytes_); !stored.ok()) return stored;
  return response;
}

absl::Status ModelStore::Store(const std::string& sha256, const std::string& bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (sizes_.count(sha256) > 0) return absl::OkStatus();
    const int64_t size = static_cast<int64_t>(bytes.size());
    if (stored_bytes_ + size > options_.max_stored_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "UploadModel: storing ", size, " more bytes would exceed --max_stored_model_bytes (",
          options_.max_stored_bytes, "; ", stored_bytes_, " stored in ", sizes_.size(), " files)"));
    }
    if (options_.directory.empty()) {
      memory_[sha256] = std::make_shared<const std::string>(bytes);
      sizes_[sha256] = size;
      stored_bytes_ += size;
      return absl::OkStatus();
    }
  }
  // Written outside the lock; a concurrent upload of the same file writes the same bytes.
  if (absl::Status written = WriteFileAtomically(PathOf(sha256), bytes); !written.ok()) {
    return written;
  }
  absl::MutexLock lock(&mu_);
  if (sizes_.emplace(sha256, static_cast<int64_t>(bytes.size())).second) {
    stored_bytes_ += static_cast<int64_t>(bytes.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ModelStore::Size(const std::string& sha256) const {
  absl::MutexLock lock(&mu_);
  auto found = sizes_.find(sha256);
  if (found == sizes_.end()) {
    return absl::NotFoundError(absl::StrCat("no stored model file has SHA-256 '",
                                            absl::CHexEscape(sha256.substr(0, 100)),
                                            "' (upload it with UploadModel first)"));
  }
  return static_cast<uint64_t>(found->second);
}

absl::StatusOr<std::shared_ptr<const std::string>> ModelStore::Read(
    const std::string& sha256) const {
  absl::StatusOr<uint64_t> size = Size(sha256);
  if (!size.ok()) return size.status();
  if (options_.directory.empty()) {
    absl::MutexLock lock(&mu_);
    return memory_.at(sha256);
  }
  const std::string path = PathOf(sha256);
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::string>(std::istreambuf_iterator<char>(in),
                                             std::istreambuf_iterator<char>());
  if (bytes->size() != *size) {
    return absl::DataLossError(absl::StrCat("model file ", path, ": ", bytes->size(),
                                            " bytes on disk, ", *size, " when stored"));
  }
  return std::shared_ptr<const std::string>(std::move(bytes));
}

int64_t ModelStore::stored_bytes() const {
  absl::MutexLock lock(&mu_);
  return stored_bytes_;
}

size_t ModelStore::stored_files() const {
  absl::MutexLock lock(&mu_);
  return sizes_.size();
}

}  // namespace tributary::coordinator
