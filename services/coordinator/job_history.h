// A job's per-step history (v1::JobHistory in proto/coordinator.proto), built from the
// step and evaluation reports its workers send with their heartbeats: the reports of
// one step are gathered until every worker of the generation has completed it, then
// become one StepPoint; evaluations become EvaluationPoints; each worker's timings go
// to its own timeline. Bounded as JobHistory's comment says (the thinning lives here).
// Also the job's own PS traffic, from the workers' per-generation byte counts.
// Not thread-safe: the coordinator holds its lock around every call.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_JOB_HISTORY_H_
#define TRIBUTARY_SERVICES_COORDINATOR_JOB_HISTORY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace tributary::coordinator {

// Bounds of what one heartbeat may carry for the history (HeartbeatRequest.steps,
// .evaluations, .bytes_pushed/pulled); docs/security.md lists them.
inline constexpr int kMaxStepReports = 1024;
inline constexpr int kMaxEvaluationReports = 64;
inline constexpr uint64_t kMaxReportedStep = uint64_t{1} << 40;  // JobSpec max_steps' bound.
inline constexpr uint32_t kMaxReportedSamples = 65536;           // global_batch_size's bound.
inline constexpr double kMaxReportedSeconds = 86400;
inline constexpr uint64_t kMaxReportedBytes = uint64_t{1} << 53;

// INVALID_ARGUMENT naming the first bad entry and field, e.g.
// "steps[3].step_seconds: must be a finite number in [0, 86400], got -1".
absl::Status ValidateHistoryReports(const v1::HeartbeatRequest& request);

struct HistoryLimits {
  size_t max_points = 2000;        // --history_points: step points and evaluations.
  size_t max_worker_points = 500;  // --history_worker_points: per worker timeline.
  size_t max_workers = 64;         // Workers with a timeline.
  // Steps gathered and not complete on every worker yet (ASYNC workers may drift
  // apart): beyond this the oldest becomes a point with the reports it has.
  size_t max_pending_steps = 4096;
  double straggler_factor = 1.5;
};

// A worker as its reports are filed.
struct ReportingWorker {
  std::string worker_id;
  std::string node_name;
  uint32_t global_rank = 0;
};

class JobHistory {
 public:
  JobHistory(const std::string& job_id, const HistoryLimits& limits);
  // A history read back from its file; the limits in force now apply from here on.
  JobHistory(v1::JobHistory restored, const HistoryLimits& limits);

  // A worker of the running generation reported `reports` (steps it ran, evaluations).
  // Reports of steps already recorded are dropped.
  void AddReports(const ReportingWorker& worker, const v1::HeartbeatRequest& reports,
                  absl::Time now);
  // Every worker of the generation has completed the steps up to `job_step`: their
  // gathered reports become points.
  void CompleteThrough(uint64_t job_step, absl::Time now);
  // A new generation resumes at `resume_step` (steps completed): the gathered steps up
  // to it become points; everything recorded past it is dropped (it runs again).
  void ResumeAt(uint64_t resume_step, absl::Time now);
  // The job ended: what is still gathered becomes points.
  void Finish(absl::Time now);

  // `worker` reported `pushed`/`pulled` bytes so far in `generation` (a generation of
  // this job): what it added since its last report is the job's.
  void CountTraffic(const std::string& worker_id, uint64_t generation, uint64_t pushed,
                    uint64_t pulled);

  const v1::JobHistory& proto() const { return history_; }

 private:
  struct Pending {
    uint32_t epoch = 0;
    double weighted_loss = 0;
    double unweighted_loss = 0;
    uint64_t samples = 0;
    uint32_t workers = 0;
    double samples_per_second = 0;
    double push_wait_seconds = 0;
    std::vector<std::pair<std::string, double>> step_seconds;  // (worker id, seconds).
  };
  struct Traffic {
    uint64_t generation = 0;
    uint64_t pushed = 0;
    uint64_t pulled = 0;
  };

  void Complete(uint64_t step, const Pending& pending, absl::Time now);
  v1::WorkerTimeline* TimelineOf(const ReportingWorker& worker);
  void Reindex();

  HistoryLimits limits_;
  v1::JobHistory history_;
  std::map<uint64_t, Pending> pending_;        // By step.
  uint64_t recorded_through_ = 0;              // Steps at or below are points (or gone).
  std::map<std::string, int> timeline_index_;  // Worker id -> history_.workers index.
  std::set<std::string> without_timeline_;     // Counted, not kept (capped).
  std::map<std::string, Traffic> traffic_;     // Last count per worker (capped).
};

// Every job's history, by job id, with what still has to be written to disk.
class HistoryBook {
 public:
  explicit HistoryBook(const HistoryLimits& limits) : limits_(limits) {}

  const HistoryLimits& limits() const { return limits_; }
  JobHistory& For(const std::string& job_id);  // Created empty when missing.
  JobHistory* Find(const std::string& job_id);
  void Restore(v1::JobHistory restored);
  // Drops the histories of jobs no longer kept (JobBook keeps the newest 100); their
  // ids, for their files to go too.
  std::vector<std::string> Retain(const std::deque<v1::Job>& jobs);

  // A history changed; `urgent` (the job ended) is written at the next chance.
  void MarkChanged(const std::string& job_id, bool urgent);
  // Something changed and it is urgent, or `interval` passed since the last take.
  bool Due(absl::Time now, absl::Duration interval) const;
  // Copies of the changed histories (to write outside the lock); clears the marks.
  std::vector<v1::JobHistory> TakeChanged(absl::Time now);

 private:
  HistoryLimits limits_;
  std::map<std::string, JobHistory> histories_;
  std::set<std::string> changed_;
  bool urgent_ = false;
  absl::Time last_take_ = absl::InfinitePast();
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_JOB_HISTORY_H_
