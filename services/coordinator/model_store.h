// The coordinator's model files: TorchScript files users upload with their jobs,
// kept under their SHA-256 (in <state_dir>/models/<sha256>.pt, or in memory without a
// state dir) and served to the workers. One concern: it knows nothing of jobs or
// gRPC; the gRPC edge streams into an Upload and out of Read.
//
//   ModelStore store(options);
//   std::unique_ptr<ModelStore::Upload> upload = store.StartUpload();
//   upload->Header(header);  upload->Chunk(bytes) ...;  upload->Finish();
//   absl::StatusOr<std::shared_ptr<const std::string>> file = store.Read(sha256);
#ifndef TRIBUTARY_SERVICES_COORDINATOR_MODEL_STORE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_MODEL_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/sha256.h"
#include "proto/coordinator.pb.h"

namespace tributary::coordinator {

struct ModelStoreOptions {
  std::string directory;                         // "" = keep files in memory only.
  int64_t max_model_bytes = int64_t{256} << 20;  // One file.
  int64_t max_stored_bytes = int64_t{4} << 30;   // All files together.
  int max_concurrent_uploads = 2;                // Each holds up to max_model_bytes in memory.
};

// OK when `bytes` looks like what torch.jit.save writes: a zip archive holding
// <name>/data.pkl and <name>/version. The workers load it for real; this refuses
// the obvious mistakes (a state_dict pickle, a text file) at upload.
absl::Status CheckTorchScriptArchive(const std::string& file_name, const std::string& bytes);

class ModelStore {
 public:
  explicit ModelStore(ModelStoreOptions options);

  // Creates the directory and indexes the <sha256>.pt files already there.
  absl::Status Open();

  // One UploadModel stream. Not thread-safe (one stream drives it).
  class Upload {
   public:
    ~Upload();
    absl::Status Header(const v1::ModelFileHeader& header);
    absl::Status Chunk(const std::string& bytes);
    // Checks size, digest and archive, then stores the file (or finds it stored).
    absl::StatusOr<v1::UploadModelResponse> Finish();

   private:
    friend class ModelStore;
    explicit Upload(ModelStore* store) : store_(store) {}
    ModelStore* store_;
    bool have_header_ = false;
    bool finished_ = false;
    v1::ModelFileHeader header_;
    std::string bytes_;
    Sha256 hash_;
  };

  // RESOURCE_EXHAUSTED when max_concurrent_uploads are under way.
  absl::StatusOr<std::unique_ptr<Upload>> StartUpload();

  // Size of the stored file with this digest; NOT_FOUND naming the digest.
  absl::StatusOr<uint64_t> Size(const std::string& sha256) const;
  // The stored file's bytes; NOT_FOUND, or DATA_LOSS when the file on disk changed.
  absl::StatusOr<std::shared_ptr<const std::string>> Read(const std::string& sha256) const;

  int64_t stored_bytes() const;
  size_t stored_files() const;
  const ModelStoreOptions& options() const { return options_; }

 private:
  std::string PathOf(const std::string& sha256) const;
  absl::Status Store(const std::string& sha256, const std::string& bytes);
  void UploadEnded();

  const ModelStoreOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  // In memory (no directory): the files themselves.
  std::map<std::string, std::shared_ptr<const std::string>> memory_ ABSL_GUARDED_BY(mu_);
  int64_t stored_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int uploads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_MODEL_STORE_H_
