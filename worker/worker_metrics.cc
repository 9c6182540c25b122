#include "worker/worker_metrics.h"

namespace tributary::worker {
namespace {

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : steps(prometheus::BuildGauge()
                .Name("tributary_worker_steps_completed")
                .Help("Training steps this worker has completed in the current job.")
                .Register(registry)
                .Add({})),
      generation(prometheus::BuildGauge()
                     .Name("tributary_worker_generation")
                     .Help("Generation this worker trains in (0: none).")
                     .Register(registry)
                     .Add({})),
      samples_per_second(prometheus::BuildGauge()
                             .Name("tributary_worker_samples_per_second")
                             .Help("This worker's recent training throughput.")
                             .Register(registry)
                             .Add({})),
      test_accuracy(prometheus::BuildGauge()
                        .Name("tributary_worker_test_accuracy")
                        .Help("Latest test accuracy this worker measured (-1: none).")
                        .Register(registry)
                        .Add({})),
      step_seconds(prometheus::BuildHistogram()
                       .Name("tributary_worker_step_seconds")
                       .Help("Wall time of a training step, compute through update.")
                       .Register(registry)
                       .Add({}, SecondsBuckets())),
      push_wait_seconds(prometheus::BuildHistogram()
                            .Name("tributary_worker_push_wait_seconds")
                            .Help("Per step: time the node leader waited for the PS's "
                                  "updates of the previous step (overlapped with this "
                                  "step's forward pass).")
                            .Register(registry)
                            .Add({}, SecondsBuckets())),
      reduce_seconds(prometheus::BuildHistogram()
                         .Name("tributary_worker_reduce_seconds")
                         .Help("Per step: intra-node gradient reduction time.")
                         .Register(registry)
                         .Add({}, SecondsBuckets())),
      parameters_wait_seconds(
          prometheus::BuildHistogram()
              .Name("tributary_worker_parameters_wait_seconds")
              .Help("Per step: longest time a replica's forward pass waited for the previous "
                    "step's updated parameters (the part of the update not overlapped).")
              .Register(registry)
              .Add({}, SecondsBuckets())),
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
                        .Register(registry)) {
  test_accuracy.Set(-1);
}

}  // namespace tributary::worker
