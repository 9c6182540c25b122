// The worker's Prometheus metrics (rendered at /metrics; docs/worker.md lists them).
// Of the job it trains, labelled job_id (the series of an earlier job are removed
// when the next one starts, so a long-lived worker does not pile them up):
//   tributary_worker_steps_completed, tributary_worker_samples_per_second,
//   tributary_worker_test_accuracy, tributary_worker_training_loss,
//   tributary_worker_learning_rate (gauges)
//   tributary_worker_samples_total (counter)
//   tributary_worker_{step,push_wait,reduce,parameters_wait,forward,backward,copy,push}_seconds
//   (histograms: one observation per step, StepTime)
// Of the worker process:
//   tributary_worker_generation (gauge)
//   tributary_worker_bytes_{pushed,pulled}_total, tributary_worker_step_failures_total
#ifndef TRIBUTARY_WORKER_WORKER_METRICS_H_
#define TRIBUTARY_WORKER_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <string>

namespace tributary::worker {

// The per-step time histograms, one observation each per step.
enum class StepTime {
  kStep,            // tributary_worker_step_seconds
  kPushWait,        // tributary_worker_push_wait_seconds
  kReduce,          // tributary_worker_reduce_seconds
  kParametersWait,  // tributary_worker_parameters_wait_seconds
  kForward,         // tributary_worker_forward_seconds
  kBackward,        // tributary_worker_backward_seconds
  kCopy,            // tributary_worker_copy_seconds
  kPush,            // tributary_worker_push_seconds
};
inline constexpr int kStepTimes = static_cast<int>(StepTime::kPush) + 1;

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);

  // The job the per-job series below belong to from now on (its series are made, the
  // previous job's removed). Not thread-safe: the training thread calls it and the
  // accessors below.
  void StartJob(const std::string& job_id);
  const std::string& job_id() const { return job_id_; }

  // The current job's series (a job "" until StartJob).
  prometheus::Gauge& steps() { return *steps_; }
  prometheus::Gauge& samples_per_second() { return *samples_per_second_; }
  prometheus::Counter& samples() { return *samples_; }
  prometheus::Gauge& test_accuracy() { return *test_accuracy_; }
  prometheus::Gauge& training_loss() { return *training_loss_; }
  prometheus::Gauge& learning_rate() { return *learning_rate_; }
  prometheus::Histogram& step_time(StepTime which) {
    return *step_times_[static_cast<int>(which)];
  }

  prometheus::Gauge& generation;
  prometheus::Counter& bytes_pushed;
  prometheus::Counter& bytes_pulled;
  prometheus::Family<prometheus::Counter>& step_failures;  // By reason.

 private:
  prometheus::Family<prometheus::Gauge>& steps_family_;
  prometheus::Family<prometheus::Gauge>& samples_per_second_family_;
  prometheus::Family<prometheus::Counter>& samples_family_;
  prometheus::Family<prometheus::Gauge>& test_accuracy_family_;
  prometheus::Family<prometheus::Gauge>& training_loss_family_;
  prometheus::Family<prometheus::Gauge>& learning_rate_family_;
  std::array<prometheus::Family<prometheus::Histogram>*, kStepTimes> step_time_families_;

  std::string job_id_;
  prometheus::Gauge* steps_ = nullptr;
  prometheus::Gauge* samples_per_second_ = nullptr;
  prometheus::Counter* samples_ = nullptr;
  prometheus::Gauge* test_accuracy_ = nullptr;
  prometheus::Gauge* training_loss_ = nullptr;
  prometheus::Gauge* learning_rate_ = nullptr;
  std::array<prometheus::Histogram*, kStepTimes> step_times_{};
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_METRICS_H_
