#include "services/coordinator/job_history.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/model_metrics.h"
#include "common/proto_time.h"

namespace tributary::coordinator {
namespace {

// Workers whose traffic is followed per job, and extra workers counted without a
// timeline: enough for any real job, bounded against a flood of registrations.
constexpr size_t kMaxTrafficWorkers = 4096;
constexpr size_t kMaxUncountedWorkers = 65536;

absl::Status Bad(const std::string& field, const std::string& rule, const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule, ", got ", got));
}

absl::Status CheckSeconds(const std::string& field, double seconds) {
  if (std::isfinite(seconds) && seconds >= 0 && seconds <= kMaxReportedSeconds) {
    return absl::OkStatus();
  }
  return Bad(field, absl::StrCat("must be a finite number in [0, ", kMaxReportedSeconds, "]"),
             absl::StrCat(seconds));
}

absl::Status CheckStep(const std::string& field, uint64_t step) {
  if (step >= 1 && step <= kMaxReportedStep) return absl::OkStatus();
  return Bad(field, "must be in [1, 2^40] (steps completed)", absl::StrCat(step));
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// Appends `point` to a series kept by stride: every point but the last has a step that
// is a multiple of *stride; the last is the latest, whatever its step. When more than
// `limit` points lie on the stride, it doubles and the points off it go.
template <typename Point>
void AppendStrided(google::protobuf::RepeatedPtrField<Point>& points, uint64_t* stride,
                   size_t limit, Point point) {
  if (*stride == 0) *stride = 1;
  if (!points.empty() && points[points.size() - 1].step() % *stride != 0) points.RemoveLast();
  *points.Add() = std::move(point);
  auto on_stride = [&] {
    const bool tail = points[points.size() - 1].step() % *stride != 0;
    return static_cast<size_t>(points.size()) - (tail ? 1 : 0);
  };
  while (on_stride() > std::max<size_t>(limit, 1)) {
    *stride *= 2;
    google::protobuf::RepeatedPtrField<Point> kept;
    const int last = points.size() - 1;
    for (int i = 0; i < last; ++i) {
      if (points[i].step() % *stride == 0) *kept.Add() = std::move(points[i]);
    }
    *kept.Add() = std::move(points[last]);
    points.Swap(&kept);
  }
}

// Drops the points past `step` (they are at the end: series are ordered by step).
template <typename Point>
void DropAfter(google::protobuf::RepeatedPtrField<Point>& points, uint64_t step) {
  while (!points.empty() && points[points.size() - 1].step() > step) points.RemoveLast();
}

// The lower median (so that one slow worker of two stands out, as on the live page).
double LowerMedian(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

absl::Status CheckMetrics(const std::string& field,
                          const google::protobuf::Map<std::string, double>& metrics) {
  // The engine's own bounds (common/model_metrics.h): a worker reports no more.
  if (metrics.size() > kMaxModelMetrics) {
    return Bad(field, absl::StrCat("at most ", kMaxModelMetrics, " metrics"),
               absl::StrCat(metrics.size()));
  }
  for (const auto& [name, value] : metrics) {
    if (!IsMetricName(name)) {
      return Bad(field, MetricNameRule(),
                 absl::StrCat("'", absl::CHexEscape(name.substr(0, 80)), "'"));
    }
    if (!std::isfinite(value)) {
      return Bad(absl::StrCat(field, "[", name, "]"), "must be a finite number",
                 absl::StrCat(value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateHistoryReports(const v1::HeartbeatRequest& request) {
  if (request.steps_size() > kMaxStepReports) {
    return Bad("steps", absl::StrCat("at most ", kMaxStepReports, " step reports per heartbeat"),
               absl::StrCat(request.steps_size()));
  }
  if (request.evaluations_size() > kMaxEvaluationReports) {
    return Bad("evaluations",
               absl::StrCat("at most ", kMaxEvaluationReports, " evaluations per heartbeat"),
               absl::StrCat(request.evaluations_size()));
  }
  if (request.bytes_pushed() > kMaxReportedBytes) {
    return Bad("bytes_pushed", "must be at most 2^53", absl::StrCat(request.bytes_pushed()));
  }
  if (request.bytes_pulled() > kMaxReportedBytes) {
    return Bad("bytes_pulled", "must be at most 2^53", absl::StrCat(request.bytes_pulled()));
  }
  for (int i = 0; i < request.steps_size(); ++i) {
    const v1::StepReport& step = request.steps(i);
    const std::string name = absl::StrCat("steps[", i, "]");
    if (absl::Status ok = CheckStep(name + ".step", step.step()); !ok.ok()) return ok;
    if (step.samples() > kMaxReportedSamples) {
      return Bad(name + ".samples", absl::StrCat("must be at most ", kMaxReportedSamples),
                 absl::StrCat(step.samples()));
    }
    for (const auto& [field, seconds] :
         {std::pair<const char*, double>{"step_seconds", step.step_seconds()},
          {"compute_seconds", step.compute_seconds()},
          {"reduce_seconds", step.reduce_seconds()},
          {"push_wait_seconds", step.push_wait_seconds()},
          {"parameters_wait_seconds", step.parameters_wait_seconds()}}) {
      if (absl::Status ok = CheckSeconds(absl::StrCat(name, ".", field), seconds); !ok.ok()) {
        return ok;
      }
    }
  }
  if (absl::Status ok = CheckMetrics("test_metrics", request.test_metrics()); !ok.ok()) return ok;
  for (int i = 0; i < request.evaluations_size(); ++i) {
    const v1::EvaluationReport& evaluation = request.evaluations(i);
    const std::string name = absl::StrCat("evaluations[", i, "]");
    if (absl::Status ok = CheckStep(name + ".step", evaluation.step()); !ok.ok()) return ok;
    const float accuracy = evaluation.test_accuracy();
    // -1: a model with its own loss, which has no accuracy.
    if (!((accuracy >= 0 && accuracy <= 1) || accuracy == -1)) {
      return Bad(name + ".test_accuracy", "must be in [0, 1] (or -1: none)", absl::StrCat(accuracy));
    }
    if (absl::Status ok = CheckMetrics(name + ".metrics", evaluation.metrics()); !ok.ok()) {
      return ok;
    }
  }
  return absl::OkStatus();
}

JobHistory::JobHistory(const std::string& job_id, const HistoryLimits& limits) : limits_(limits) {
  history_.set_job_id(job_id);
  history_.set_max_points(static_cast<uint32_t>(limits.max_points));
  history_.set_max_worker_points(static_cast<uint32_t>(limits.max_worker_points));
  history_.set_stride(1);
  history_.set_straggler_factor(limits.straggler_factor);
}

JobHistory::JobHistory(v1::JobHistory restored, const HistoryLimits& limits)
    : limits_(limits), history_(std::move(restored)) {
  history_.set_max_points(static_cast<uint32_t>(limits.max_points));
  history_.set_max_worker_points(static_cast<uint32_t>(limits.max_worker_points));
  history_.set_straggler_factor(limits.straggler_factor);
  if (history_.stride() == 0) history_.set_stride(1);
  if (history_.steps_size() > 0)
    recorded_through_ = history_.steps(history_.steps_size() - 1).step();
  Reindex();
}

void JobHistory::Reindex() {
  timeline_index_.clear();
  for (int i = 0; i < history_.workers_size(); ++i) {
    timeline_index_[history_.workers(i).worker_id()] = i;
  }
}

v1::WorkerTimeline* JobHistory::TimelineOf(const ReportingWorker& worker) {
  auto found = timeline_index_.find(worker.worker_id);
  if (found != timeline_index_.end()) {
    v1::WorkerTimeline* timeline = history_.mutable_workers(found->second);
    timeline->set_global_rank(worker.global_rank);
    return timeline;
  }
  if (static_cast<size_t>(history_.workers_size()) >= limits_.max_workers) {
    if (without_timeline_.size() < kMaxUncountedWorkers &&
        without_timeline_.insert(worker.worker_id).second) {
      history_.set_workers_without_timeline(history_.workers_without_timeline() + 1);
    }
    return nullptr;
  }
  timeline_index_[worker.worker_id] = history_.workers_size();
  v1::WorkerTimeline* timeline = history_.add_workers();
  timeline->set_worker_id(worker.worker_id);
  timeline->set_node_name(worker.node_name);
  timeline->set_global_rank(worker.global_rank);
  timeline->set_stride(1);
  return timeline;
}

void JobHistory::AddReports(const ReportingWorker& worker, const v1::HeartbeatRequest& reports,
                            absl::Time now) {
  v1::WorkerTimeline* timeline = reports.steps_size() > 0 ? TimelineOf(worker) : nullptr;
  for (const v1::StepReport& report : reports.steps()) {
    if (report.step() <= recorded_through_) continue;  // Late: that step is recorded.
    Pending& pending = pending_[report.step()];
    bool seen = false;
    for (const auto& [id, seconds] : pending.step_seconds) seen = seen || id == worker.worker_id;
    if (seen) continue;  // The same step twice from one worker: the first counts.
    pending.epoch = std::max(pending.epoch, report.epoch());
    pending.weighted_loss += static_cast<double>(report.loss()) * report.samples();
    pending.unweighted_loss += report.loss();
    pending.samples += report.samples();
    ++pending.workers;
    if (report.step_seconds() > 0) {
      pending.samples_per_second += report.samples() / report.step_seconds();
    }
    pending.push_wait_seconds = std::max(pending.push_wait_seconds, report.push_wait_seconds());
    pending.step_seconds.emplace_back(worker.worker_id, report.step_seconds());

    if (timeline != nullptr) {
      timeline->set_steps(timeline->steps() + 1);
      timeline->set_total_step_seconds(timeline->total_step_seconds() + report.step_seconds());
      timeline->set_total_push_wait_seconds(timeline->total_push_wait_seconds() +
                                            report.push_wait_seconds());
      const int size = timeline->points_size();
      if (size == 0 || timeline->points(size - 1).step() < report.step()) {
        v1::WorkerStepTiming timing;
        timing.set_step(report.step());
        timing.set_step_seconds(report.step_seconds());
        timing.set_compute_seconds(report.compute_seconds());
        timing.set_reduce_seconds(report.reduce_seconds());
        timing.set_push_wait_seconds(report.push_wait_seconds());
        timing.set_parameters_wait_seconds(report.parameters_wait_seconds());
        timing.set_samples(report.samples());
        uint64_t stride = timeline->stride();
        AppendStrided(*timeline->mutable_points(), &stride, limits_.max_worker_points,
                      std::move(timing));
        timeline->set_stride(stride);
      }
    }
  }
  while (pending_.size() > limits_.max_pending_steps) {
    auto oldest = pending_.begin();
    Complete(oldest->first, oldest->second, now);
    recorded_through_ = oldest->first;
    pending_.erase(oldest);
  }

  for (const v1::EvaluationReport& report : reports.evaluations()) {
    auto& evaluations = *history_.mutable_evaluations();
    const int size = evaluations.size();
    if (size > 0 && evaluations[size - 1].step() > report.step()) continue;  // Stale.
    v1::EvaluationPoint* point = size > 0 && evaluations[size - 1].step() == report.step()
                                     ? &evaluations[size - 1]
                                     : evaluations.Add();
    point->set_step(report.step());
    point->set_test_accuracy(report.test_accuracy());
    point->set_test_loss(report.test_loss());
    *point->mutable_metrics() = report.metrics();
    *point->mutable_time() = ToProto(now);
    if (static_cast<size_t>(evaluations.size()) > std::max<size_t>(limits_.max_points, 2)) {
      // Every other one of the older evaluations goes; the latest stays.
      google::protobuf::RepeatedPtrField<v1::EvaluationPoint> kept;
      const int last = evaluations.size() - 1;
      for (int i = 0; i < last; i += 2) *kept.Add() = std::move(evaluations[i]);
      *kept.Add() = std::move(evaluations[last]);
      evaluations.Swap(&kept);
    }
  }
}

void JobHistory::Complete(uint64_t step, const Pending& pending, absl::Time now) {
  v1::StepPoint point;
  point.set_step(step);
  point.set_epoch(pending.epoch);
  *point.mutable_time() = ToProto(now);
  const double loss = pending.samples > 0   ? pending.weighted_loss / pending.samples
                      : pending.workers > 0 ? pending.unweighted_loss / pending.workers
                                            : 0;
  point.set_loss(static_cast<float>(loss));
  point.set_samples_per_second(pending.samples_per_second);
  point.set_push_wait_seconds(pending.push_wait_seconds);
  point.set_workers(pending.workers);
  std::vector<double> times;
  for (const auto& [id, seconds] : pending.step_seconds) {
    times.push_back(seconds);
    if (point.slowest_worker().empty() || seconds > point.step_seconds()) {
      point.set_step_seconds(seconds);
      point.set_slowest_worker(id);
    }
  }
  const double median = LowerMedian(times);
  point.set_median_step_seconds(median);
  if (times.size() >= 2 && median > 0) {
    const double threshold = limits_.straggler_factor * median;
    for (const auto& [id, seconds] : pending.step_seconds) {
      if (seconds <= threshold) continue;
      auto found = timeline_index_.find(id);
      if (found == timeline_index_.end()) continue;
      v1::WorkerTimeline* timeline = history_.mutable_workers(found->second);
      timeline->set_slow_steps(timeline->slow_steps() + 1);
    }
  }
  uint64_t stride = history_.stride();
  AppendStrided(*history_.mutable_steps(), &stride, limits_.max_points, std::move(point));
  history_.set_stride(stride);
  history_.set_steps_recorded(history_.steps_recorded() + 1);
}

void JobHistory::CompleteThrough(uint64_t job_step, absl::Time now) {
  while (!pending_.empty() && pending_.begin()->first <= job_step) {
    Complete(pending_.begin()->first, pending_.begin()->second, now);
    pending_.erase(pending_.begin());
  }
  recorded_through_ = std::max(recorded_through_, job_step);
}

void JobHistory::ResumeAt(uint64_t resume_step, absl::Time now) {
  CompleteThrough(resume_step, now);
  pending_.clear();
  DropAfter(*history_.mutable_steps(), resume_step);
  DropAfter(*history_.mutable_evaluations(), resume_step);
  for (v1::WorkerTimeline& timeline : *history_.mutable_workers()) {
    DropAfter(*timeline.mutable_points(), resume_step);
  }
  recorded_through_ = resume_step;
}

void JobHistory::Finish(absl::Time now) {
  for (const auto& [step, pending] : pending_) {
    Complete(step, pending, now);
    recorded_through_ = std::max(recorded_through_, step);
  }
  pending_.clear();
}

void JobHistory::CountTraffic(const std::string& worker_id, uint64_t generation, uint64_t pushed,
                              uint64_t pulled) {
  if (traffic_.count(worker_id) == 0 && traffic_.size() >= kMaxTrafficWorkers) {
    traffic_.erase(traffic_.begin());
  }
  Traffic& traffic = traffic_[worker_id];
  if (traffic.generation != generation) traffic = Traffic{generation, 0, 0};
  if (pushed > traffic.pushed) {
    history_.set_bytes_pushed(SaturatingAdd(history_.bytes_pushed(), pushed - traffic.pushed));
    traffic.pushed = pushed;
  }
  if (pulled > traffic.pulled) {
    history_.set_bytes_pulled(SaturatingAdd(history_.bytes_pulled(), pulled - traffic.pulled));
    traffic.pulled = pulled;
  }
}

JobHistory& HistoryBook::For(const std::string& job_id) {
  auto found = histories_.find(job_id);
  if (found == histories_.end()) {
    found = histories_.emplace(job_id, JobHistory(job_id, limits_)).first;
  }
  return found->second;
}

JobHistory* HistoryBook::Find(const std::string& job_id) {
  auto found = histories_.find(job_id);
  return found == histories_.end() ? nullptr : &found->second;
}

void HistoryBook::Restore(v1::JobHistory restored) {
  const std::string job_id = restored.job_id();
  histories_.erase(job_id);
  histories_.emplace(job_id, JobHistory(std::move(restored), limits_));
}

std::vector<std::string> HistoryBook::Retain(const std::deque<v1::Job>& jobs) {
  std::set<std::string> kept;
  for (const v1::Job& job : jobs) kept.insert(job.job_id());
  std::vector<std::string> dropped;
  for (auto it = histories_.begin(); it != histories_.end();) {
    if (kept.count(it->first) > 0) {
      ++it;
    } else {
      dropped.push_back(it->first);
      changed_.erase(it->first);
      it = histories_.erase(it);
    }
  }
  return dropped;
}

void HistoryBook::MarkChanged(const std::string& job_id, bool urgent) {
  if (histories_.count(job_id) == 0) return;
  changed_.insert(job_id);
  urgent_ = urgent_ || urgent;
}

bool HistoryBook::Due(absl::Time now, absl::Duration interval) const {
  return !changed_.empty() && (urgent_ || now - last_take_ >= interval);
}

std::vector<v1::JobHistory> HistoryBook::TakeChanged(absl::Time now) {
  std::vector<v1::JobHistory> taken;
  for (const std::string& job_id : changed_) {
    if (const JobHistory* history = Find(job_id)) taken.push_back(history->proto());
  }
  changed_.clear();
  urgent_ = false;
  last_take_ = now;
  return taken;
}

}  // namespace tributary::coordinator
