// The jobs: ids, the state machine with its event log, progress history and the
// final result. One job at most is active (not COMPLETED, FAILED or STOPPED); the
// newest 100 are kept, the oldest finished ones dropped first. Not thread-safe:
// Coordinator holds its lock around every call. Every change is reported to the
// `changed` listener (urgent = a state change, which is saved at once; progress is
// saved every --state_save_interval).
#ifndef TRIBUTARY_SERVICES_COORDINATOR_JOB_BOOK_H_
#define TRIBUTARY_SERVICES_COORDINATOR_JOB_BOOK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace tributary::coordinator {

// One worker of the running generation as progress sees it.
struct ReportView {
  const v1::HeartbeatRequest* report = nullptr;  // Null: no report for this generation yet.
  uint32_t replicas = 0;
  uint32_t global_rank = 0;
};

class JobBook {
 public:
  JobBook(size_t max_events, size_t progress_history, std::function<void(bool urgent)> changed);

  // From the state file.
  void Restore(uint64_t next_job_number, std::vector<v1::Job> jobs);
  uint64_t next_job_number() const { return next_job_number_; }
  const std::deque<v1::Job>& jobs() const { return jobs_; }

  v1::Job* Active();
  const v1::Job* Active() const;
  v1::Job* Find(const std::string& job_id);
  // The job a control call (PauseJob, ...) means: `job_id`, or the active job when it
  // is empty. NOT_FOUND / FAILED_PRECONDITION naming the problem.
  absl::StatusOr<v1::Job*> ControlTarget(const std::string& job_id);
  // The job GetJob("") and the dashboard show: the active one, else the newest.
  const v1::Job* Shown() const;

  // Adds a PENDING job for `spec` (defaults applied, validated). FAILED_PRECONDITION
  // while another job is active.
  absl::StatusOr<v1::Job*> Submit(const v1::JobSpec& spec, absl::Time now);
  // Records the transition in the job's event log (the oldest events beyond
  // max_events dropped). `to` may equal the current state (an event only).
  void Transition(v1::Job& job, v1::JobState to, const std::string& reason, absl::Time now);
  // Transition to a terminal state, stamping `finished`.
  void Finish(v1::Job& job, v1::JobState to, const std::string& reason, absl::Time now);

  // Progress of the running generation from its workers' reports: the job's step is
  // the slowest worker's; when it advanced, a progress point (mean loss weighted by
  // replicas, rank 0's test accuracy, summed throughput) is added, the older points
  // thinned beyond progress_history.
  struct Progress {
    bool all_training = false;  // Every worker reported TRAINING, PAUSING, PAUSED or FINISHED.
    bool all_finished = false;  // Every worker reported FINISHED.
  };
  Progress RecordProgress(v1::Job& job, uint64_t generation, uint64_t resume_step,
                          const std::vector<ReportView>& workers, absl::Time now);

 private:
  const size_t max_events_;
  const size_t progress_history_;
  const std::function<void(bool urgent)> changed_;
  std::deque<v1::Job> jobs_;  // Oldest first.
  uint64_t next_job_number_ = 1;
};

// The result of a job whose workers all finished. `bytes_pushed/pulled`: the job's own
// PS traffic (JobHistory's, summed over its generations from the workers' counts).
v1::JobResult JobResultOf(const v1::Job& job, const std::vector<ReportView>& workers,
                          uint64_t bytes_pushed, uint64_t bytes_pulled, absl::Time now);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_JOB_BOOK_H_
