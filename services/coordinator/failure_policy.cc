#include "services/coordinator/failure_policy.h"

#include "absl/strings/str_cat.h"

namespace tributary::coordinator {

ReportKind ClassifyReport(const v1::HeartbeatRequest& report, bool in_current_generation,
                          bool had_failed) {
  if (report.phase() == v1::WORKER_FAILED) return ReportKind::kFailed;
  // The worker gave up its step or could not start the generation (a collective or a
  // shard failed) and waits for a new one. Nobody else may notice (every process is
  // still alive), so the generation ends here; it counts as a worker error, so that a
  // cause that persists fails the job by rule B instead of re-forming forever.
  if (report.phase() == v1::WORKER_RENDEZVOUS && !report.error().empty() && in_current_generation) {
    return ReportKind::kLeftStep;
  }
  if (had_failed) return ReportKind::kRecovered;
  return ReportKind::kNormal;
}

bool MissedHeartbeats(absl::Time last_heartbeat, absl::Time now, absl::Duration timeout) {
  return now - last_heartbeat > timeout;
}

std::optional<std::string> SameErrorEverywhere(
    uint64_t generation, size_t generation_size,
    const std::map<std::string, std::string>& generation_failures,
    const std::vector<std::optional<std::string>>& registered, const std::string& error) {
  // First form: every worker of a generation of at least two workers.
  bool same = generation_size >= 2 && generation_failures.size() == generation_size;
  for (const auto& [id, text] : generation_failures) same = same && text == error;
  if (same) {
    return absl::StrCat("every worker of generation ", generation, " (", generation_failures.size(),
                        ") failed with: ", error);
  }
  // Second form: every registered worker.
  if (registered.empty()) return std::nullopt;
  for (const std::optional<std::string>& failed : registered) {
    if (!failed.has_value() || *failed != error) return std::nullopt;
  }
  return absl::StrCat("every registered worker (", registered.size(), ") failed with: ", error);
}

std::optional<std::string> FailureStreak::GenerationEnded(bool worker_error, bool progressed,
                                                          const std::string& reason) {
  if (!worker_error) {
    if (progressed) in_a_row_ = 0;
    return std::nullopt;
  }
  in_a_row_ = progressed ? 1 : in_a_row_ + 1;
  if (limit_ == 0 || in_a_row_ < limit_) return std::nullopt;
  return absl::StrCat(in_a_row_,
                      " generations in a row ended by worker errors without completing a step; "
                      "last: ",
                      reason);
}

}  // namespace tributary::coordinator
