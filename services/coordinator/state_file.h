// Durable storage of CoordinatorState in --state_dir: written atomically (temp file,
// fsync, rename, fsync of the directory) behind a header line holding the body's
// length and CRC-32, with the previous version kept beside it. A torn or corrupt file
// is detected and reported, never silently used.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_STATE_FILE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_STATE_FILE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/coordinator/coordinator_state.pb.h"

namespace tributary::coordinator {

class StateFile {
 public:
  // Files: <dir>/coordinator_state.json and <dir>/coordinator_state.prev.json.
  explicit StateFile(std::string dir);

  const std::string& path() const { return path_; }
  const std::string& previous_path() const { return previous_path_; }

  // Replaces the file atomically; the version it replaces becomes the previous one.
  absl::Status Save(const CoordinatorState& state) const;

  struct Loaded {
    CoordinatorState state;
    std::string source;   // The file the state came from.
    std::string problem;  // Non-empty when the current file was unusable (why, and that
                          // the previous version was used instead).
  };
  // nullopt when neither file exists (a fresh start). When the current file is torn or
  // corrupt, it is renamed to <path>.corrupt and the previous version is used if that
  // one is intact; DATA_LOSS naming both files when neither is.
  absl::StatusOr<std::optional<Loaded>> Load() const;

  // Parses one file's bytes: DATA_LOSS naming `name` for a bad header, a length or
  // checksum mismatch, or a body that is not a CoordinatorState.
  static absl::StatusOr<CoordinatorState> Decode(const std::string& name, const std::string& bytes);
  static absl::StatusOr<std::string> Encode(const CoordinatorState& state);

 private:
  std::string dir_;
  std::string path_;
  std::string previous_path_;
};

// The same atomic write for the coordinator's other files (the jobs' histories):
// `bytes` to a temp file beside `path`, fsync, rename over `path`, fsync of `dir`
// (created when missing).
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 const std::string& bytes);
// A whole file; nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_STATE_FILE_H_
