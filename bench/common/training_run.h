// What a benchmark learns from one training run of any program (the local cluster,
// the single-process trainer, PyTorch DDP), and how runs are printed side by side and
// as JSON, so every comparison reads the same way.
#ifndef TRIBUTARY_BENCH_COMMON_TRAINING_RUN_H_
#define TRIBUTARY_BENCH_COMMON_TRAINING_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/cpu_window.h"

namespace tributary::bench {

// One test-set evaluation.
struct Evaluation {
  uint64_t step = 0;  // Steps done when it was taken (for the cluster: when seen).
  double accuracy = 0;
  double seconds = 0;  // Since training started, evaluations before it included.
};

// Sums of the workers' per-step histograms (tributary_worker_*_seconds) over all of
// their steps; workers == 0 when nothing was measured.
struct StepTimes {
  int workers = 0;
  uint64_t steps = 0;            // Worker-steps (each worker counts its own).
  double step_seconds = 0;       // Compute through update.
  double push_wait_seconds = 0;  // Node leaders waiting for the PS's new values.
  double reduce_seconds = 0;     // Intra-node gradient reduction (overlaps backward).
  // Forward passes standing still for the previous step's parameters (the part of the
  // update the overlap did not hide).
  double parameters_wait_seconds = 0;
  // The slowest replica's forward and backward passes, host<->device copies (GPU), and
  // the leader handing partitions to the PS connection.
  double forward_seconds = 0;
  double backward_seconds = 0;
  double copy_seconds = 0;
  double push_seconds = 0;
  // The PS shards' optimizer applications (tributary_ps_optimizer_apply_seconds),
  // summed over the shards (SYNC and LOCAL_SGD apply each step's partitions once, ASYNC
  // every push); -1 when the shards' /metrics were not read. job_steps: the steps the
  // job ran.
  double ps_apply_seconds = -1;
  uint64_t job_steps = 0;
  // The shards' tributary_ps_slowest_wait_seconds_total of partition 0 (the first
  // layer's first rows: the last gradients a backward pass finishes and the first
  // parameters the next forward needs): how long the nodes' last pushes of each step
  // waited for the slowest node's, summed over the nodes and steps (with one node, 0);
  // -1 when the shards' /metrics were not read.
  double slowest_wait_seconds = -1;

  // `seconds` summed over the workers' steps as a share of their step time.
  double Share(double seconds) const { return step_seconds > 0 ? seconds / step_seconds : 0; }
  // The shards' apply time per job step as a share of the mean step; -1 when unread.
  double PsApplyShare() const {
    if (ps_apply_seconds < 0 || job_steps == 0 || MeanStepSeconds() <= 0) return -1;
    return ps_apply_seconds / job_steps / MeanStepSeconds();
  }
  double PushWaitShare() const { return step_seconds > 0 ? push_wait_seconds / step_seconds : 0; }
  // slowest_wait_seconds as a share of the workers' step time (-1 when unread): the part
  // of a step a worker spent behind the slowest one's backward pass, not the PS's.
  double SlowestWaitShare() const {
    if (slowest_wait_seconds < 0 || step_seconds <= 0) return -1;
    return slowest_wait_seconds / step_seconds;
  }
  double ReduceShare() const { return step_seconds > 0 ? reduce_seconds / step_seconds : 0; }
  double ParametersWaitShare() const {
    return step_seconds > 0 ? parameters_wait_seconds / step_seconds : 0;
  }
  double MeanStepSeconds() const { return steps > 0 ? step_seconds / steps : 0; }
};

struct TrainingRun {
  std::string name;           // Column title, e.g. "tributary local".
  double test_accuracy = -1;  // Final evaluation; negative when none.
  double final_loss = 0;      // Training loss of the last step(s).
  uint64_t steps = 0;
  uint64_t samples = 0;  // steps x global batch (an epoch's last batch may be short).
  double reported_samples_per_second = 0;  // The program's own figure (step time only).
  double setup_seconds = 0;                // Start of the process(es) to the first step.
  double training_seconds = 0;             // First step to the end, evaluations included.
  double process_seconds = 0;              // Launch to exit, as the benchmark measured it.
  std::vector<Evaluation> evaluations;
  StepTimes step_times;       // The local cluster only.
  uint64_t bytes_pushed = 0;  // The local cluster only.
  uint64_t bytes_pulled = 0;
  // The local cluster only: the job's partition cut as the coordinator resolved it
  // (GetJob), e.g. "CUT_LAYERS"; empty when unknown.
  std::string partition_cut;
  // The local cluster only, when asked (TributaryLocalOptions::account_cpu): the CPU its
  // processes and the machine spent per job step while the job ran.
  CpuUse cpu;
  std::string log_path;  // Where its output is.

  // Samples over training_seconds: the figure that includes evaluations, waits and
  // every overhead of the system.
  double SamplesPerSecond() const {
    return training_seconds > 0 ? static_cast<double>(samples) / training_seconds : 0;
  }
  // Seconds from the first step to the first evaluation at or above `target`; -1 when
  // no evaluation reached it.
  double SecondsTo(double target) const;
};

// The rows of a side-by-side table of `runs` (first column: what the row is). When
// target > 0 a row gives each run's time to that accuracy. With two runs or more, a
// ratio column per run but the last divides that run's figure by the last run's.
std::string SideBySide(const std::vector<const TrainingRun*>& runs, double target);

// The run's evaluations as "accuracy@seconds" points ("none" without any).
std::string AccuracyCurve(const TrainingRun& run);

// numerator / denominator with `digits` decimals for a JSON line, or null when either
// is not positive (a side that measured nothing).
std::string RatioJson(double numerator, double denominator, int digits = 4);

// The run as a JSON object (target > 0 adds seconds_to_target).
std::string TrainingRunJson(const TrainingRun& run, double target);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_TRAINING_RUN_H_
