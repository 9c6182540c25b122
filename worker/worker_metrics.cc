#include "worker/worker_metrics.h"

namespace tributary::worker {
namespace {

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& registry, const char* name,
                                               const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& registry,
                                                       const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : generation(prometheus::BuildGauge()
                     .Name("tributary_worker_generation")
                     .Help("Generation this worker trains in (0: none).")
                     .Register(registry)
                     .Add({})),
      bytes_pushed(prometheus::BuildCounter()
                       .Name("tributary_worker_bytes_pushed_total")
                       .Help("Gradient bytes this worker pushed to the PS.")
                       .Register(registry)
                       .Add({})),
      bytes_pulled(prometheus::BuildCounter()
                       .Name("tributary_worker_bytes_pulled_total")
                       .Help("Parameter bytes this worker received from the PS.")
                       .Register(registry)
                       .Add({})),
      step_failures(prometheus::BuildCounter()
                        .Name("tributary_worker_step_failures_total")
                        .Help("Steps or set-ups abandoned, by reason.")
                        .Register(registry)),
      steps_family_(Gauges(registry, "tributary_worker_steps_completed",
                           "Training steps this worker has completed in the job.")),
      samples_per_second_family_(Gauges(registry, "tributary_worker_samples_per_second",
                                        "This worker's recent training throughput.")),
      samples_family_(prometheus::BuildCounter()
                          .Name("tributary_worker_samples_total")
                          .Help("Training samples this worker's replicas have trained on in "
                                "the job (since this process joined it).")
                          .Register(registry)),
      test_accuracy_family_(Gauges(registry, "tributary_worker_test_accuracy",
                                   "Latest test accuracy this worker measured (-1: none).")),
      training_loss_family_(Gauges(registry, "tributary_worker_training_loss",
                                   "Mean training loss of this worker's replicas at its last "
                                   "step.")),
      learning_rate_family_(Gauges(registry, "tributary_worker_learning_rate",
                                   "Learning rate of the job's optimizer at this worker's last "
                                   "step (the schedule and warm-up applied).")),
      step_seconds_family_(Histograms(registry, "tributary_worker_step_seconds",
                                      "Wall time of a training step, compute through update.")),
      push_wait_seconds_family_(Histograms(
          registry, "tributary_worker_push_wait_seconds",
          "Per step: time the node leader waited for the PS's updates of the previous step "
          "(overlapped with this step's forward pass).")),
      reduce_seconds_family_(Histograms(registry, "tributary_worker_reduce_seconds",
                                        "Per step: intra-node gradient reduction time.")),
      parameters_wait_seconds_family_(Histograms(
          registry, "tributary_worker_parameters_wait_seconds",
          "Per step: longest time a replica's forward pass waited for the previous step's "
          "updated parameters (the part of the update not overlapped).")) {
  StartJob("");
}

void WorkerMetrics::StartJob(const std::string& job_id) {
  if (steps_ != nullptr && job_id == job_id_) return;
  if (steps_ != nullptr) {
    steps_family_.Remove(steps_);
    samples_per_second_family_.Remove(samples_per_second_);
    samples_family_.Remove(samples_);
    test_accuracy_family_.Remove(test_accuracy_);
    training_loss_family_.Remove(training_loss_);
    learning_rate_family_.Remove(learning_rate_);
    step_seconds_family_.Remove(step_seconds_);
    push_wait_seconds_family_.Remove(push_wait_seconds_);
    reduce_seconds_family_.Remove(reduce_seconds_);
    parameters_wait_seconds_family_.Remove(parameters_wait_seconds_);
  }
  job_id_ = job_id;
  const std::map<std::string, std::string> labels = {{"job_id", job_id}};
  steps_ = &steps_family_.Add(labels);
  samples_per_second_ = &samples_per_second_family_.Add(labels);
  samples_ = &samples_family_.Add(labels);
  test_accuracy_ = &test_accuracy_family_.Add(labels);
  training_loss_ = &training_loss_family_.Add(labels);
  learning_rate_ = &learning_rate_family_.Add(labels);
  step_seconds_ = &step_seconds_family_.Add(labels, SecondsBuckets());
  push_wait_seconds_ = &push_wait_seconds_family_.Add(labels, SecondsBuckets());
  reduce_seconds_ = &reduce_seconds_family_.Add(labels, SecondsBuckets());
  parameters_wait_seconds_ = &parameters_wait_seconds_family_.Add(labels, SecondsBuckets());
  test_accuracy_->Set(-1);
}

}  // namespace tributary::worker
