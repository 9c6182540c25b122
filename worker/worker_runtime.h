// The worker process's control loop: registers with the coordinator, heartbeats,
// and runs whatever generation it is assigned (a TrainingSession), obeying the
// coordinator's actions (wait, re-rendezvous, pause, stop) at step boundaries. The
// coordinator is reached through a CoordinatorLink (coordinator_link.h), so the
// control logic runs against a fake in worker_runtime_test.cc. It also answers the
// Worker service (GetStatus, Drain) through WorkerHandler, which keeps gRPC out of
// the business logic.
#ifndef TRIBUTARY_WORKER_WORKER_RUNTIME_H_
#define TRIBUTARY_WORKER_WORKER_RUNTIME_H_

#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "common/clock.h"
#include "common/float_file.h"
#include "common/shutdown.h"
#include "proto/coordinator.pb.h"
#include "proto/worker.pb.h"
#include "worker/byte_totals.h"
#include "worker/coordinator_link.h"
#include "worker/devices.h"
#include "worker/engine/dataset.h"
#include "worker/heartbeat_reports.h"
#include "worker/job_inputs.h"
#include "worker/training_session.h"
#include "worker/worker_control.h"
#include "worker/worker_metrics.h"

namespace tributary::worker {

// What the Worker gRPC service calls (worker_service.h adapts it to gRPC).
class WorkerHandler {
 public:
  virtual ~WorkerHandler() = default;
  virtual v1::WorkerStatus GetStatus() = 0;
  // Finish the current step, deregister, stop. Idempotent.
  virtual v1::WorkerPhase Drain(const std::string& reason) = 0;
};

struct WorkerOptions {
  std::string coordinator_address;
  // Every data path a job names (relative ones from the working directory) must lie
  // here, symbolic links followed; "/" = anywhere the worker's user can read.
  std::string data_root = "/";
  std::string node_name;
  DeviceRequest devices;
  std::string advertise_host = "127.0.0.1";
  int grpc_port = 0;
  int http_port = 0;
  ChannelOptions channel;
  // Gloo's transport binds here for the node's other worker processes.
  std::string bind_host = "127.0.0.1";
  absl::Duration collective_timeout = absl::Seconds(30);
  absl::Duration update_timeout = absl::Seconds(120);
  // Give up when the coordinator cannot be reached for this long at start-up.
  absl::Duration register_timeout = absl::Minutes(5);
  // Leave once the job this worker trained ends (tributary local); otherwise stay
  // registered for the next job.
  bool exit_after_job = false;
  int64_t eval_batch_size = 1000;
  // Threads per CPU matrix product; 0 = cores / (replicas x processes of the node).
  int cpu_threads = 0;
  // Apply each step's PS update while the next step's forward runs.
  bool overlap_updates = true;
  // PushPull streams (connections) to each PS shard.
  int ps_streams_per_shard = 1;
  // How PushPull travels (PsClient).
  PsTransport ps_transport = PsTransport::kAuto;
  // Shared memory on the shards' local sockets (PsClient).
  bool ps_shared_memory = true;
  // How long fetching a job's TorchScript file from the coordinator may take.
  absl::Duration model_fetch_timeout = absl::Minutes(5);
  // Time for the control decisions (heartbeats, the registration deadline); null: the
  // real clock. Not owned.
  const Clock* clock = nullptr;
  // How a session reaches the PS; unset: PsClient over gRPC or the data plane (tests
  // use the in-memory connection, SessionOptions::ps_connection).
  std::function<std::unique_ptr<PsConnection>(const PsIdentity& identity,
                                               const v1::PartitionPlan& plan)>
      ps_connection;
};

class WorkerRuntime : public WorkerHandler {
 public:
  // `link`: how to reach the coordinator; null = gRPC to options.coordinator_address
  // (created by Run).
  WorkerRuntime(WorkerOptions options, prometheus::Registry& registry,
                std::unique_ptr<CoordinatorLink> link = nullptr);
  ~WorkerRuntime() override;

  // Where this worker's own service listens (known once its server started); call
  // before Run.
  void SetEndpoint(const std::string& host, int grpc_port, int http_port);

  // Registers and trains until shutdown fires (SIGTERM, Drain) or, with
  // exit_after_job, the job ends (then it requests shutdown itself). On the way out
  // it finishes the step in progress and deregisters. Errors: the coordinator never
  // answered, bad devices.
  absl::Status Run(ShutdownSignal& shutdown);

  v1::WorkerStatus GetStatus() override;
  v1::WorkerPhase Drain(const std::string& reason) override;

 private:
  // What this worker reports of the job it trains; it starts afresh with every job
  // (RunGeneration) and is gone when the job ends (ForgetJob), so that nothing of one
  // job (its error, step, loss, accuracy) is ever reported for the next.
  struct Progress {
    std::string job_id;  // The job all of this belongs to; empty when idle.
    v1::WorkerPhase phase = v1::WORKER_IDLE;
    uint64_t generation = 0;
    uint64_t step = 0;  // Steps completed.
    uint32_t epoch = 0;
    float loss = 0;
    float test_accuracy = -1;
    float test_loss = 0;
    uint64_t test_accuracy_step = 0;  // The step the evaluation above was made after.
    std::map<std::string, double> test_metrics;  // That evaluation's named metrics.
    double samples_per_second = 0;
    double step_seconds = 0;
    double push_wait_seconds = 0;
    double reduce_seconds = 0;
    uint64_t steps_per_epoch = 0;
    uint64_t total_steps = 0;
    uint64_t holding_at_step = 0;  // WORKER_PAUSING / WORKER_PAUSED: the boundary.
    // The first step boundary it can still hold at: the one it holds at, or, while a
    // step runs (it cannot stop inside one), the boundary after that step.
    uint64_t next_boundary = 0;
    std::string error;
  };

  // Copies what both a heartbeat (v1::HeartbeatRequest) and GetStatus
  // (v1::WorkerStatus) report of the progress.
  template <typename Report>
  static void PutProgress(const Progress& progress, Report& report);
  absl::Status Register();
  void HeartbeatLoop();
  void SendHeartbeat();
  // What the next heartbeat reports; the step and evaluation reports move into it.
  v1::HeartbeatRequest HeartbeatRequestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one assignment until it ends; returns when a new generation is pending, the
  // job stopped or finished, or shutdown was asked for.
  void RunGeneration(const v1::Assignment& assignment);
  void TrainSteps(TrainingSession& session, uint64_t first_step);
  // Waits for the update of the last step run (FinishUpdate); on success `steps_done`
  // steps count as completed. On failure it reports the step as failed and returns
  // false: the generation is over for this worker.
  bool FinishUpdate(TrainingSession& session, uint64_t steps_done);
  // What a failed step or update means: an interruption, or an error to report.
  void StepFailed(uint64_t step, const absl::Status& status);
  // Adds the session's new PS traffic to the totals and the counters.
  void AccountBytes(const TrainingSession& session);
  // At the boundary before `step`: holds while the job is paused (the pause protocol of
  // proto/coordinator.proto: WORKER_PAUSING until the coordinator names the common
  // boundary, running on to it, then WORKER_PAUSED with the update applied). False
  // when the pending update failed: the generation is over for this worker.
  bool HoldIfPaused(TrainingSession& session, uint64_t step);
  // Evaluates after `steps_done` steps; the result goes into the next heartbeat.
  void EvaluateInto(TrainingSession& session, uint64_t steps_done);
  // A reason to leave the current step ("new generation 4", "job stopped", ...) or "".
  std::string Interruption() ABSL_LOCKS_EXCLUDED(mu_);
  std::string InterruptionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShuttingDown() const;
  // Interrupts the running session when there is a reason to.
  void InterruptSessionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPhase(v1::WorkerPhase phase, const std::string& error = "");
  // The job of the last assignment is over (ACTION_STOP): its progress, error,
  // reports and caches go, and the worker is idle until its next assignment.
  void ForgetJob();
  // Reports `phase` holding at `step` until the pause is lifted (or the boundary
  // becomes known, for WORKER_PAUSING), the job stops, a new generation or shutdown.
  void HoldAt(v1::WorkerPhase phase, uint64_t step);

  WorkerOptions options_;
  std::unique_ptr<CoordinatorLink> link_;
  std::vector<v1::Device> devices_;
  ShutdownSignal* shutdown_ = nullptr;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  Progress progress_ ABSL_GUARDED_BY(mu_);
  // The assignments, the pause and the stop: what to do next.
  WorkerControl control_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // The heartbeat thread ends.
  TrainingSession* active_session_ ABSL_GUARDED_BY(mu_) = nullptr;  // While one trains.
  std::string reduce_backend_ ABSL_GUARDED_BY(mu_) = "none";
  std::vector<std::string> replica_devices_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> replica_batches_ ABSL_GUARDED_BY(mu_);
  std::vector<double> replica_seconds_ ABSL_GUARDED_BY(mu_);
  // The steps run and evaluations made in the current generation since the last
  // answered heartbeat.
  HeartbeatReports reports_ ABSL_GUARDED_BY(mu_);
  ByteTotals bytes_pushed_;  // Since the worker started, over every session.
  ByteTotals bytes_pulled_;
  std::thread heartbeat_thread_;

  // The job's inputs, kept across its generations and dropped when it ends (ForgetJob).
  JobInputs inputs_;

  WorkerMetrics metrics_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_WORKER_RUNTIME_H_
