#include "worker/heartbeat_reports.h"

namespace tributary::worker {
namespace {

// Keeps a report list within `limit` by dropping every other one of the older entries
// (the newest stays).
template <typename Report>
void Thin(std::vector<Report>& reports, size_t limit) {
  if (reports.size() <= limit) return;
  std::vector<Report> kept;
  for (size_t i = 0; i + 1 < reports.size(); i += 2) kept.push_back(std::move(reports[i]));
  kept.push_back(std::move(reports.back()));
  reports.swap(kept);
}

}  // namespace

void HeartbeatReports::AddStep(uint64_t step, uint32_t epoch, const StepStats& stats) {
  v1::StepReport& report = steps_.emplace_back();
  report.set_step(step + 1);
  report.set_epoch(epoch);
  report.set_loss(static_cast<float>(stats.loss.mean_loss()));
  report.set_samples(static_cast<uint32_t>(stats.loss.samples));
  report.set_step_seconds(stats.step_seconds);
  report.set_compute_seconds(stats.compute_seconds);
  report.set_reduce_seconds(stats.reduce_seconds);
  report.set_push_wait_seconds(stats.push_wait_seconds);
  report.set_parameters_wait_seconds(stats.parameters_wait_seconds);
  Thin(steps_, kMaxSteps);
}

void HeartbeatReports::AddEvaluation(uint64_t steps_done, float accuracy, float loss,
                                     const std::map<std::string, double>& metrics) {
  v1::EvaluationReport& report = evaluations_.emplace_back();
  report.set_step(steps_done);
  report.set_test_accuracy(accuracy);
  report.set_test_loss(loss);
  for (const auto& [name, value] : metrics) (*report.mutable_metrics())[name] = value;
  Thin(evaluations_, kMaxEvaluations);
}

void HeartbeatReports::MoveInto(v1::HeartbeatRequest& request) {
  for (v1::StepReport& report : steps_) *request.add_steps() = std::move(report);
  for (v1::EvaluationReport& report : evaluations_) {
    *request.add_evaluations() = std::move(report);
  }
  Clear();
}

void HeartbeatReports::PutBack(const v1::HeartbeatRequest& request) {
  steps_.insert(steps_.begin(), request.steps().begin(), request.steps().end());
  evaluations_.insert(evaluations_.begin(), request.evaluations().begin(),
                      request.evaluations().end());
  Thin(steps_, kMaxSteps);
  Thin(evaluations_, kMaxEvaluations);
}

void HeartbeatReports::Clear() {
  steps_.clear();
  evaluations_.clear();
}

}  // namespace tributary::worker
