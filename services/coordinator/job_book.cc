#include "services/coordinator/job_book.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "common/random_hex.h"

namespace tributary::coordinator {
namespace {

// Jobs kept in memory and in the state file; the oldest finished ones go first.
constexpr size_t kMaxJobsKept = 100;

// Training steps are counted: a worker's `step` is how many steps it has completed,
// which is also the index of the next step it runs.
uint64_t TrainSamples(const v1::JobSpec& spec) {
  if (spec.dataset().format() != v1::SYNTHETIC) return 0;
  uint64_t samples = spec.dataset().synthetic_train_samples();
  if (spec.dataset().train_limit() > 0) samples = std::min(samples, spec.dataset().train_limit());
  return samples;
}

// Keeps at most `limit` points by dropping every other one of the older points, so a
// long run still shows its whole curve at a coarser resolution.
void ThinProgress(google::protobuf::RepeatedPtrField<v1::ProgressPoint>& points, size_t limit) {
  if (limit < 2 || static_cast<size_t>(points.size()) <= limit) return;
  google::protobuf::RepeatedPtrField<v1::ProgressPoint> kept;
  const int last = points.size() - 1;
  for (int i = 0; i < last; i += 2) *kept.Add() = points[i];
  *kept.Add() = points[last];
  points.Swap(&kept);
}

}  // namespace

JobBook::JobBook(size_t max_events, size_t progress_history,
                 std::function<void(bool urgent)> changed)
    : max_events_(max_events), progress_history_(progress_history), changed_(std::move(changed)) {}

void JobBook::Restore(uint64_t next_job_number, std::vector<v1::Job> jobs) {
  next_job_number_ = std::max<uint64_t>(1, next_job_number);
  jobs_.assign(std::make_move_iterator(jobs.begin()), std::make_move_iterator(jobs.end()));
}

v1::Job* JobBook::Active() {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if (!IsTerminal(it->state())) return &*it;
  }
  return nullptr;
}

const v1::Job* JobBook::Active() const { return const_cast<JobBook*>(this)->Active(); }

v1::Job* JobBook::Find(const std::string& job_id) {
  for (v1::Job& job : jobs_) {
    if (job.job_id() == job_id) return &job;
  }
  return nullptr;
}

absl::StatusOr<v1::Job*> JobBook::ControlTarget(const std::string& job_id) {
  if (job_id.empty()) {
    v1::Job* job = Active();
    if (job == nullptr) return absl::FailedPreconditionError("no active job (job_id was empty)");
    return job;
  }
  v1::Job* job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job id '", job_id, "'"));
  return job;
}

const v1::Job* JobBook::Shown() const {
  const v1::Job* shown = Active();
  if (shown == nullptr && !jobs_.empty()) shown = &jobs_.back();
  return shown;
}

absl::StatusOr<v1::Job*> JobBook::Submit(const v1::JobSpec& spec, absl::Time now) {
  if (const v1::Job* active = Active()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", active->job_id(), " ('", active->spec().name(), "') is ",
                     v1::JobState_Name(active->state()),
                     ": the coordinator runs one active job at a time; stop it first"));
  }
  v1::Job job;
  job.set_job_id(absl::StrCat("job-", next_job_number_++, "-", RandomHex(4)));
  *job.mutable_spec() = spec;
  *job.mutable_created() = ToProto(now);
  job.set_total_steps(spec.epochs() == 0 ? spec.max_steps() : 0);
  if (const uint64_t samples = TrainSamples(spec); samples > 0) {
    job.set_total_steps(TotalSteps(spec, samples));
    job.set_steps_per_epoch(StepsPerEpoch(spec, samples));
  }
  jobs_.push_back(std::move(job));
  Transition(jobs_.back(), v1::PENDING,
             absl::StrCat("submitted: '", spec.name(), "', model ", spec.model().name(), ", nodes ",
                          spec.nodes_min(), "..", spec.nodes_max()),
             now);
  while (jobs_.size() > kMaxJobsKept && IsTerminal(jobs_.front().state())) jobs_.pop_front();
  return &jobs_.back();
}

void JobBook::Transition(v1::Job& job, v1::JobState to, const std::string& reason, absl::Time now) {
  v1::JobEvent* event = job.add_events();
  *event->mutable_time() = ToProto(now);
  event->set_from_state(job.state());
  event->set_to_state(to);
  event->set_generation(job.generation());
  event->set_reason(reason);
  if (static_cast<size_t>(job.events_size()) > max_events_) {
    job.mutable_events()->DeleteSubrange(0, job.events_size() - max_events_);
  }
  LOG(INFO) << "job " << job.job_id() << ": " << v1::JobState_Name(job.state()) << " -> "
            << v1::JobState_Name(to) << ": " << reason;
  job.set_state(to);
  job.set_state_reason(reason);
  changed_(true);
}

void JobBook::Finish(v1::Job& job, v1::JobState to, const std::string& reason, absl::Time now) {
  Transition(job, to, reason, now);
  *job.mutable_finished() = ToProto(now);
}

namespace {

// Whether two sets of named metrics hold the same values.
bool SameMetrics(const google::protobuf::Map<std::string, double>& a,
                 const google::protobuf::Map<std::string, double>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, value] : a) {
    auto found = b.find(name);
    if (found == b.end() || found->second != value) return false;
  }
  return true;
}

// Whether a worker's report carries an evaluation: the step it was made after (workers
// since test_accuracy_step), or an accuracy (workers before it; a model with its own
// loss reports -1 there).
bool HasEvaluated(const v1::HeartbeatRequest& report) {
  return report.test_accuracy_step() > 0 || report.test_accuracy() >= 0;
}

}  // namespace

JobBook::Progress JobBook::RecordProgress(v1::Job& job, uint64_t generation, uint64_t resume_step,
                                          const std::vector<ReportView>& workers, absl::Time now) {
  Progress progress;
  progress.all_training = true;
  progress.all_finished = true;
  uint64_t step = UINT64_MAX;
  uint32_t min_epoch = UINT32_MAX;
  double loss_sum = 0;
  uint32_t loss_weight = 0;
  double throughput = 0;
  for (const ReportView& worker : workers) {
    // A report of another generation, or of another job, says nothing of this one.
    if (worker.report == nullptr || worker.report->generation() != generation ||
        (!worker.report->job_id().empty() && worker.report->job_id() != job.job_id())) {
      progress.all_training = progress.all_finished = false;
      step = std::min(step, resume_step);
      continue;
    }
    const v1::HeartbeatRequest& report = *worker.report;
    step = std::min(step, std::max(report.step(), resume_step));
    min_epoch = std::min(min_epoch, report.epoch());
    if (report.phase() != v1::WORKER_TRAINING && report.phase() != v1::WORKER_PAUSED &&
        report.phase() != v1::WORKER_PAUSING && report.phase() != v1::WORKER_FINISHED) {
      progress.all_training = false;
    }
    if (report.phase() != v1::WORKER_FINISHED) progress.all_finished = false;
    if (report.total_steps() > 0) job.set_total_steps(report.total_steps());
    if (report.steps_per_epoch() > 0) job.set_steps_per_epoch(report.steps_per_epoch());
    if (report.step() > resume_step) {
      loss_sum += static_cast<double>(report.loss()) * worker.replicas;
      loss_weight += worker.replicas;
    }
    throughput += report.samples_per_second();
  }
  if (step == UINT64_MAX) step = resume_step;
  // The newest evaluation at or before the point's step (rank 0's first): a report that
  // arrived later than the others may carry an evaluation of a step the point is not at.
  const v1::HeartbeatRequest* evaluation = nullptr;
  for (const ReportView& worker : workers) {
    const v1::HeartbeatRequest* report = worker.report;
    if (report == nullptr || report->generation() != generation ||
        (!report->job_id().empty() && report->job_id() != job.job_id()) ||
        !HasEvaluated(*report) || report->test_accuracy_step() > step) {
      continue;
    }
    if (evaluation == nullptr || worker.global_rank == 0) evaluation = report;
  }
  const bool advanced = step > job.step();
  job.set_step(step);
  if (job.steps_per_epoch() > 0) {
    job.set_epoch(static_cast<uint32_t>(step / job.steps_per_epoch()));
  } else if (min_epoch != UINT32_MAX) {
    job.set_epoch(min_epoch);
  }
  if (advanced && loss_weight > 0) {
    v1::ProgressPoint point;
    point.set_test_accuracy(-1);
    if (evaluation != nullptr) {
      point.set_test_accuracy(evaluation->test_accuracy());
      point.set_test_loss(evaluation->test_loss());
      *point.mutable_metrics() = evaluation->test_metrics();
    } else if (job.progress_size() > 0) {
      // No report holds one now: the last point's evaluation stands (all of this job's).
      const v1::ProgressPoint& last = job.progress(job.progress_size() - 1);
      point.set_test_accuracy(last.test_accuracy());
      point.set_test_loss(last.test_loss());
      *point.mutable_metrics() = last.metrics();
    }
    point.set_step(step);
    point.set_epoch(job.epoch());
    point.set_loss(static_cast<float>(loss_sum / loss_weight));
    point.set_samples_per_second(throughput);
    *point.mutable_time() = ToProto(now);
    *job.add_progress() = std::move(point);
    ThinProgress(*job.mutable_progress(), progress_history_);
    changed_(false);
  } else if (!advanced && evaluation != nullptr && job.progress_size() > 0 &&
             job.progress(job.progress_size() - 1).step() == step) {
    // An evaluation reached after the point at its step was made (a worker reports the
    // step before it evaluates there, e.g. the last one) completes that point, so the
    // last point carries what the job's result will.
    v1::ProgressPoint& last = *job.mutable_progress(job.progress_size() - 1);
    if (last.test_accuracy() != evaluation->test_accuracy() ||
        last.test_loss() != evaluation->test_loss() ||
        !SameMetrics(last.metrics(), evaluation->test_metrics())) {
      last.set_test_accuracy(evaluation->test_accuracy());
      last.set_test_loss(evaluation->test_loss());
      *last.mutable_metrics() = evaluation->test_metrics();
      changed_(false);
    }
  }
  return progress;
}

v1::JobResult JobResultOf(const v1::Job& job, const std::vector<ReportView>& workers,
                          uint64_t bytes_pushed, uint64_t bytes_pulled, absl::Time now) {
  v1::JobResult result;
  result.set_steps(job.step());
  float accuracy = -1;
  float test_loss = 0;
  bool evaluated = false;
  double loss_sum = 0;
  uint32_t loss_weight = 0;
  for (const ReportView& worker : workers) {
    if (worker.report == nullptr) continue;
    const v1::HeartbeatRequest& report = *worker.report;
    loss_sum += static_cast<double>(report.loss()) * worker.replicas;
    loss_weight += worker.replicas;
    // Rank 0's evaluation is the job's; any other worker's is a fallback.
    if (HasEvaluated(report) && (!evaluated || worker.global_rank == 0)) {
      evaluated = true;
      accuracy = report.test_accuracy();
      test_loss = report.test_loss();
      *result.mutable_metrics() = report.test_metrics();
    }
  }
  result.set_bytes_pushed(bytes_pushed);
  result.set_bytes_pulled(bytes_pulled);
  result.set_final_loss(loss_weight > 0 ? static_cast<float>(loss_sum / loss_weight) : 0);
  result.set_test_accuracy(accuracy);
  result.set_test_loss(test_loss);
  double throughput_sum = 0;
  int throughput_points = 0;
  for (const v1::ProgressPoint& point : job.progress()) {
    if (point.samples_per_second() > 0) {
      throughput_sum += point.samples_per_second();
      ++throughput_points;
    }
  }
  result.set_samples_per_second(throughput_points > 0 ? throughput_sum / throughput_points : 0);
  if (job.has_started()) {
    result.set_wall_seconds(absl::ToDoubleSeconds(now - FromProto(job.started())));
  }
  return result;
}

}  // namespace tributary::coordinator
