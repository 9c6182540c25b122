// Where and how the jobs' histories (v1::JobHistory) are kept on disk: one file per
// job, <state_dir>/history/<job_id>.json, proto3 JSON written atomically (temp file,
// fsync, rename). The coordinator writes them; `tributary show` reads them back.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_HISTORY_FILE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_HISTORY_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace tributary::coordinator {

std::string HistoryDirectory(const std::string& state_dir);  // <state_dir>/history
// INVALID_ARGUMENT for a job id that is not a plain file name ([A-Za-z0-9._-], 1-128
// characters, not starting with a dot).
absl::StatusOr<std::string> HistoryPath(const std::string& state_dir, const std::string& job_id);

absl::Status SaveHistoryFile(const std::string& state_dir, const v1::JobHistory& history);
// NOT_FOUND when the job has no history file; DATA_LOSS naming the file when it does
// not hold a history of that job.
absl::StatusOr<v1::JobHistory> LoadHistoryFile(const std::string& state_dir,
                                               const std::string& job_id);
// The file of a job no longer kept; a missing file is fine.
absl::Status RemoveHistoryFile(const std::string& state_dir, const std::string& job_id);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_HISTORY_FILE_H_
