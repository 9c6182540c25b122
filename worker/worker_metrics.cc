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

// The step time histograms' names and help, in StepTime order.
struct StepTimeSeries {
  const char* name;
  const char* help;
};
constexpr StepTimeSeries kStepTimeSeries[kStepTimes] = {
    {"tributary_worker_step_seconds", "Wall time of a training step, compute through update."},
    {"tributary_worker_push_wait_seconds",
     "Per step: time the node leader waited for the PS's updates of the previous step "
     "(overlapped with this step's forward pass)."},
    {"tributary_worker_reduce_seconds", "Per step: intra-node gradient reduction time."},
    {"tributary_worker_parameters_wait_seconds",
     "Per step: longest time a replica's forward pass waited for the previous step's "
     "updated parameters (the part of the update not overlapped)."},
    {"tributary_worker_forward_seconds",
     "Per step: the slowest replica's forward pass, to its first gradient (its waits for "
     "parameters not included; on a GPU, until the first gradient's work is queued)."},
    {"tributary_worker_backward_seconds",
     "Per step: the slowest replica's backward pass, from its first gradient to its end."},
    {"tributary_worker_copy_seconds",
     "Per step: host<->device copies of parameters and gradients, summed over the GPU "
     "replicas (0 on CPU)."},
    {"tributary_worker_push_seconds",
     "Per step: time the node leader spent handing the step's partitions to the PS "
     "connection."},
};

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
                                   "step (the schedule and warm-up applied).")) {
  for (int i = 0; i < kStepTimes; ++i) {
    step_time_families_[i] = &prometheus::BuildHistogram()
                                  .Name(kStepTimeSeries[i].name)
                                  .Help(kStepTimeSeries[i].help)
                                  .Register(registry);
  }
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
    for (int i = 0; i < kStepTimes; ++i) step_time_families_[i]->Remove(step_times_[i]);
  }
  job_id_ = job_id;
  const std::map<std::string, std::string> labels = {{"job_id", job_id}};
  steps_ = &steps_family_.Add(labels);
  samples_per_second_ = &samples_per_second_family_.Add(labels);
  samples_ = &samples_family_.Add(labels);
  test_accuracy_ = &test_accuracy_family_.Add(labels);
  training_loss_ = &training_loss_family_.Add(labels);
  learning_rate_ = &learning_rate_family_.Add(labels);
  for (int i = 0; i < kStepTimes; ++i) {
    step_times_[i] = &step_time_families_[i]->Add(labels, SecondsBuckets());
  }
  test_accuracy_->Set(-1);
}

}  // namespace tributary::worker
