// The worker's Prometheus metrics (rendered at /metrics; docs/worker.md lists them):
//   tributary_worker_steps_completed, tributary_worker_generation,
//   tributary_worker_samples_per_second, tributary_worker_test_accuracy (gauges)
//   tributary_worker_{step,push_wait,reduce,parameters_wait}_seconds (histograms)
//   tributary_worker_bytes_{pushed,pulled}_total, tributary_worker_step_failures_total
#ifndef TRIBUTARY_WORKER_WORKER_METRICS_H_
#define TRIBUTARY_WORKER_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace tributary::worker {

struct WorkerMetrics {
  explicit WorkerMetrics(prometheus::Registry& registry);

  prometheus::Gauge& steps;
  prometheus::Gauge& generation;
  prometheus::Gauge& samples_per_second;
  prometheus::Gauge& test_accuracy;
  prometheus::Histogram& step_seconds;
  prometheus::Histogram& push_wait_seconds;
  prometheus::Histogram& reduce_seconds;
  prometheus::Histogram& parameters_wait_seconds;
  prometheus::Counter& bytes_pushed;
  prometheus::Counter& bytes_pulled;
  prometheus::Family<prometheus::Counter>& step_failures;  // By reason.
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_METRICS_H_
