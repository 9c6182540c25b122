#include "services/coordinator/history_file.h"

#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "services/coordinator/state_file.h"

namespace tributary::coordinator {

std::string HistoryDirectory(const std::string& state_dir) { return state_dir + "/history"; }

absl::StatusOr<std::string> HistoryPath(const std::string& state_dir, const std::string& job_id) {
  if (!IsJobId(job_id) || job_id[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("job id '", job_id.substr(0, 128), "' is not a plain file name"));
  }
  return absl::StrCat(HistoryDirectory(state_dir), "/", job_id, ".json");
}

absl::Status SaveHistoryFile(const std::string& state_dir, const v1::JobHistory& history) {
  absl::StatusOr<std::string> path = HistoryPath(state_dir, history.job_id());
  if (!path.ok()) return path.status();
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(history, &json);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("cannot encode the history of job ", history.job_id(),
                                            ": ", printed.ToString()));
  }
  json.push_back('\n');
  if (mkdir(state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create directory ", state_dir, ": ", std::strerror(errno)));
  }
  return WriteFileAtomically(HistoryDirectory(state_dir), *path, json);
}

absl::StatusOr<v1::JobHistory> LoadHistoryFile(const std::string& state_dir,
                                               const std::string& job_id) {
  absl::StatusOr<std::string> path = HistoryPath(state_dir, job_id);
  if (!path.ok()) return path.status();
  absl::StatusOr<std::optional<std::string>> bytes = ReadFileIfExists(*path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) {
    return absl::NotFoundError(absl::StrCat("no history file ", *path));
  }
  v1::JobHistory history;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // Written by a newer build: read what is known.
  const auto parsed = google::protobuf::util::JsonStringToMessage(**bytes, &history, options);
  if (!parsed.ok()) {
    return absl::DataLossError(
        absl::StrCat("history file ", *path, " does not hold a job history: ", parsed.ToString()));
  }
  if (history.job_id() != job_id) {
    return absl::DataLossError(absl::StrCat("history file ", *path, " holds the history of job '",
                                            history.job_id(), "', not of ", job_id));
  }
  return history;
}

absl::Status RemoveHistoryFile(const std::string& state_dir, const std::string& job_id) {
  absl::StatusOr<std::string> path = HistoryPath(state_dir, job_id);
  if (!path.ok()) return path.status();
  if (unlink(path->c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", *path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace tributary::coordinator
