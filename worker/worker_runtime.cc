#include "worker/worker_runtime.h"

#include <glog/logging.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/confined_path.h"
#include "common/float_file.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/usable_cores.h"
#include "common/thread_name.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/torchscript.h"

namespace tributary::worker {
namespace {

const RealClock kRealClock;

}  // namespace

// The fields a heartbeat and GetStatus both report.
template <typename Report>
void WorkerRuntime::PutProgress(const Progress& progress, Report& report) {
  report.set_step(progress.step);
  report.set_epoch(progress.epoch);
  report.set_loss(progress.loss);
  report.set_test_accuracy(progress.test_accuracy);
  report.set_samples_per_second(progress.samples_per_second);
  report.set_step_seconds(progress.step_seconds);
  report.set_push_wait_seconds(progress.push_wait_seconds);
  report.set_error(progress.error);
}

WorkerRuntime::WorkerRuntime(WorkerOptions options, prometheus::Registry& registry,
                             std::unique_ptr<CoordinatorLink> link)
    : options_(std::move(options)),
      link_(std::move(link)),
      control_(options_.clock != nullptr ? options_.clock : &kRealClock),
      inputs_(options_.data_root, options_.node_name, options_.model_fetch_timeout),
      metrics_(registry) {}

WorkerRuntime::~WorkerRuntime() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

bool WorkerRuntime::ShuttingDown() const { return shutdown_ != nullptr && shutdown_->requested(); }

void WorkerRuntime::SetEndpoint(const std::string& host, int grpc_port, int http_port) {
  options_.advertise_host = host;
  options_.grpc_port = grpc_port;
  options_.http_port = http_port;
}

absl::Status WorkerRuntime::Register() {
  v1::RegisterWorkerRequest request;
  request.set_node_name(options_.node_name);
  request.set_host(options_.advertise_host);
  request.set_grpc_port(options_.grpc_port);
  request.set_http_port(options_.http_port);
  for (const v1::Device& device : devices_) *request.add_devices() = device;
  for (int gpu : options_.devices.gpus) request.add_requested_gpus(gpu);
  request.set_pid(getpid());
  request.set_version(kVersion);
  const Clock& clock = options_.clock != nullptr ? *options_.clock : kRealClock;
  const absl::Time give_up = clock.Now() + options_.register_timeout;
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  while (true) {
    absl::StatusOr<v1::RegisterWorkerResponse> response = link_->RegisterWorker(request);
    if (response.ok()) {
      absl::MutexLock lock(&mu_);
      worker_id_ = response->worker_id();
      control_.Registered(*response);
      LOG(INFO) << "registered with the coordinator at " << options_.coordinator_address << " as "
                << worker_id_ << " (node " << options_.node_name << ", " << devices_.size()
                << " device(s))";
      return absl::OkStatus();
    }
    const absl::Status& status = response.status();
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return status;
    if (clock.Now() > give_up || ShuttingDown()) {
      return absl::Status(status.code(),
                          absl::StrCat("the coordinator at ", options_.coordinator_address,
                                       " did not answer within ",
                                       absl::FormatDuration(options_.register_timeout), "; last: ",
                                       status.message()));
    }
    LOG_EVERY_N(INFO, 20) << "waiting for the coordinator at " << options_.coordinator_address
                          << ": " << status.message();
    absl::SleepFor(backoff.Next());
  }
}

v1::HeartbeatRequest WorkerRuntime::HeartbeatRequestLocked() {
  v1::HeartbeatRequest request;
  request.set_worker_id(worker_id_);
  request.set_generation(control_.current().generation());
  request.set_job_id(control_.current().job_id());
  request.set_phase(progress_.phase);
  PutProgress(progress_, request);
  request.set_test_loss(progress_.test_loss);
  request.set_test_accuracy_step(progress_.test_accuracy_step);
  for (const auto& [name, value] : progress_.test_metrics) {
    (*request.mutable_test_metrics())[name] = value;
  }
  request.set_steps_per_epoch(progress_.steps_per_epoch);
  request.set_total_steps(progress_.total_steps);
  request.set_holding_at_step(progress_.holding_at_step);
  // A paused worker moves no samples: its last throughput would mislead.
  if (progress_.phase == v1::WORKER_PAUSED) request.set_samples_per_second(0);
  reports_.MoveInto(request);
  // This generation's traffic (counted from zero when it began, under mu_ too).
  request.set_bytes_pushed(bytes_pushed_.session());
  request.set_bytes_pulled(bytes_pulled_.session());
  if (control_.paused() && progress_.phase == v1::WORKER_TRAINING) {
    // Asked to pause while a step runs: it will hold at the boundary after it at the
    // earliest, which the coordinator needs to know to name the common boundary.
    request.set_phase(v1::WORKER_PAUSING);
    request.set_holding_at_step(progress_.next_boundary);
  }
  return request;
}

void WorkerRuntime::SendHeartbeat() {
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request = HeartbeatRequestLocked();
  }
  absl::StatusOr<v1::HeartbeatResponse> answer = link_->Heartbeat(request);
  if (!answer.ok() && !absl::IsNotFound(answer.status()) &&
      !absl::IsPermissionDenied(answer.status()) && !absl::IsInvalidArgument(answer.status())) {
    // Not delivered: the reports go with the next heartbeat (if still this generation).
    absl::MutexLock lock(&mu_);
    if (control_.current().generation() == request.generation()) {
      reports_.PutBack(request);
    }
  }
  // The coordinator forgot us (it restarted, or we were silent too long), or does not
  // take our worker credential any more: a restarted coordinator issues credentials
  // under a new key of its own.
  if (absl::IsNotFound(answer.status()) || absl::IsPermissionDenied(answer.status())) {
    LOG(WARNING) << "coordinator does not know " << request.worker_id()
                 << "; registering again: " << answer.status().message();
    if (absl::Status registered = Register(); !registered.ok()) {
      LOG(ERROR) << registered;
    }
    absl::MutexLock lock(&mu_);
    InterruptSessionLocked();  // The answer may have carried a newer assignment.
    return;
  }
  if (!answer.ok()) {
    LOG_EVERY_N(WARNING, 10) << answer.status().message();
    return;
  }
  absl::MutexLock lock(&mu_);
  if (const std::string changed = control_.Answered(*answer, request.generation());
      !changed.empty()) {
    LOG(INFO) << changed;
  }
  // A wait for the PS ends now rather than at its timeout.
  InterruptSessionLocked();
}

void WorkerRuntime::HeartbeatLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    SendHeartbeat();
    absl::MutexLock lock(&mu_);
    control_.HeartbeatSent();  // The interval runs from its answer (or its failure).
    // Until the next one is due, or at once when the worker stops.
    const absl::Duration wait = control_.NextHeartbeat() - control_.clock().Now();
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait)) return;
  }
}

void WorkerRuntime::SetPhase(v1::WorkerPhase phase, const std::string& error) {
  absl::MutexLock lock(&mu_);
  progress_.phase = phase;
  progress_.error = error;
}

void WorkerRuntime::ForgetJob() {
  std::string job_id;
  {
    absl::MutexLock lock(&mu_);
    job_id = control_.current().job_id();
    control_.ForgetJob();
    progress_ = Progress();
    reports_.Clear();
    reduce_backend_ = "none";
    replica_devices_.clear();
    replica_batches_.clear();
    replica_seconds_.clear();
  }
  inputs_.Forget();  // Only this thread (Run's) touches the job's inputs.
  metrics_.StartJob("");
  metrics_.generation.Set(0);
  LOG(INFO) << "job " << job_id << " is over: idle until the next assignment";
}

std::string WorkerRuntime::Interruption() {
  absl::MutexLock lock(&mu_);
  return InterruptionLocked();
}

std::string WorkerRuntime::InterruptionLocked() { return control_.Interruption(ShuttingDown()); }

void WorkerRuntime::InterruptSessionLocked() {
  if (active_session_ == nullptr) return;
  if (std::string why = InterruptionLocked(); !why.empty()) active_session_->Interrupt(why);
}

void WorkerRuntime::HoldAt(v1::WorkerPhase phase, uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (!control_.paused()) return;
  const v1::WorkerPhase previous = progress_.phase;
  progress_.phase = phase;
  progress_.holding_at_step = step;
  progress_.next_boundary = step;
  auto release = [this, phase]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return control_.Released(phase, ShuttingDown());
  };
  // Woken by a heartbeat's answer, or by the shutdown watcher (it takes mu_).
  mu_.Await(absl::Condition(&release));
  progress_.phase = previous;
  progress_.holding_at_step = 0;
}

bool WorkerRuntime::HoldIfPaused(TrainingSession& session, uint64_t step) {
  const bool independent = session.assignment().job().mode() == v1::ASYNC;
  while (true) {
    WorkerControl::AtBoundary what;
    {
      absl::MutexLock lock(&mu_);
      what = control_.Boundary(step, independent, ShuttingDown());
    }
    switch (what) {
      case WorkerControl::AtBoundary::kGoOn:
      case WorkerControl::AtBoundary::kLeave:  // The caller leaves the generation.
        return true;
      case WorkerControl::AtBoundary::kAwaitBoundary:
        HoldAt(v1::WORKER_PAUSING, step);
        continue;
      case WorkerControl::AtBoundary::kHold:
        if (!FinishUpdate(session, step)) return false;
        HoldAt(v1::WORKER_PAUSED, step);
        return true;
    }
  }
}

void WorkerRuntime::EvaluateInto(TrainingSession& session, uint64_t steps_done) {
  // Before the last step, the first samples of the test split; after it, all of them.
  absl::StatusOr<engine::LossStats> evaluated = session.Evaluate(
      EvalSamplesAfter(session.assignment().job(), steps_done, session.total_steps()));
  if (!evaluated.ok()) {
    LOG_FIRST_N(WARNING, 1) << "no evaluation: " << evaluated.status();
    return;
  }
  metrics_.test_accuracy().Set(evaluated->accuracy());
  absl::MutexLock lock(&mu_);
  progress_.test_accuracy = static_cast<float>(evaluated->accuracy());
  progress_.test_loss = static_cast<float>(evaluated->mean_loss());
  progress_.test_accuracy_step = steps_done;
  progress_.test_metrics = evaluated->MeanMetrics();
  reports_.AddEvaluation(steps_done, progress_.test_accuracy, progress_.test_loss,
                         progress_.test_metrics);
}

void WorkerRuntime::AccountBytes(const TrainingSession& session) {
  metrics_.bytes_pushed.Increment(
      static_cast<double>(bytes_pushed_.Update(session.bytes_pushed())));
  metrics_.bytes_pulled.Increment(
      static_cast<double>(bytes_pulled_.Update(session.bytes_pulled())));
}

void WorkerRuntime::StepFailed(uint64_t step, const absl::Status& status) {
  const std::string why = Interruption();
  metrics_.step_failures.Add({{"reason", why.empty() ? "error" : "interrupted"}}).Increment();
  if (!why.empty()) {
    LOG(INFO) << "step " << step << " abandoned: " << why;
    return;
  }
  // A peer or a shard failed: say so and wait for the coordinator's next generation.
  LOG(WARNING) << "step " << step << " failed: " << status;
  SetPhase(v1::WORKER_RENDEZVOUS, std::string(status.message()));
}

bool WorkerRuntime::FinishUpdate(TrainingSession& session, uint64_t steps_done) {
  absl::Status updated = session.FinishUpdate();
  AccountBytes(session);
  if (!updated.ok()) {
    StepFailed(steps_done == 0 ? 0 : steps_done - 1, updated);
    return false;
  }
  metrics_.steps().Set(static_cast<double>(steps_done));
  absl::MutexLock lock(&mu_);
  progress_.step = std::max(progress_.step, steps_done);
  return true;
}

void WorkerRuntime::TrainSteps(TrainingSession& session, uint64_t first_step) {
  const v1::Assignment& assignment = session.assignment();
  const bool evaluates = assignment.global_rank() == 0;
  double throughput = 0;
  for (uint64_t step = first_step; step < session.total_steps(); ++step) {
    // A paused worker holds its last step's parameters fully applied.
    if (!HoldIfPaused(session, step)) return;
    {
      absl::MutexLock lock(&mu_);
      progress_.next_boundary = step + 1;
    }
    if (std::string why = Interruption(); !why.empty()) {
      LOG(INFO) << "leaving generation " << assignment.generation() << " before step " << step
                << ": " << why;
      // Finish the last step's update when it comes (the node's other processes wait
      // for its broadcast); an interrupted one gives up within a fraction of a second.
      if (absl::Status updated = session.FinishUpdate(); !updated.ok()) {
        LOG(INFO) << "the last update was not applied: " << updated;
      }
      AccountBytes(session);
      return;
    }
    absl::StatusOr<StepStats> stats = session.RunStep(step);
    AccountBytes(session);
    if (!stats.ok()) {
      StepFailed(step, stats.status());
      return;
    }
    const double samples_per_second =
        stats->step_seconds > 0 ? stats->loss.samples / stats->step_seconds : 0;
    throughput = throughput == 0 ? samples_per_second : 0.9 * throughput + 0.1 * samples_per_second;
    metrics_.samples().Increment(static_cast<double>(stats->loss.samples));
    for (const auto& [which, seconds] :
         {std::pair{StepTime::kStep, stats->step_seconds},
          std::pair{StepTime::kPushWait, stats->push_wait_seconds},
          std::pair{StepTime::kReduce, stats->reduce_seconds},
          std::pair{StepTime::kParametersWait, stats->parameters_wait_seconds},
          std::pair{StepTime::kForward, stats->forward_seconds},
          std::pair{StepTime::kBackward, stats->backward_seconds},
          std::pair{StepTime::kCopy, stats->copy_seconds},
          std::pair{StepTime::kPush, stats->push_seconds}}) {
      metrics_.step_time(which).Observe(seconds);
    }
    // Step `step` is pushed and (overlapping) its update on the way; the steps before
    // it are complete (its forward pass needed their updates).
    const uint64_t completed = options_.overlap_updates ? step : step + 1;
    metrics_.steps().Set(static_cast<double>(completed));
    metrics_.samples_per_second().Set(throughput);
    metrics_.training_loss().Set(stats->loss.mean_loss());
    metrics_.learning_rate().Set(session.LearningRate(step));
    {
      absl::MutexLock lock(&mu_);
      progress_.step = completed;
      progress_.epoch = static_cast<uint32_t>(session.EpochOf(step));
      progress_.loss = static_cast<float>(stats->loss.mean_loss());
      progress_.samples_per_second = throughput;
      progress_.step_seconds = stats->step_seconds;
      progress_.push_wait_seconds = stats->push_wait_seconds;
      progress_.reduce_seconds = stats->reduce_seconds;
      replica_batches_ = session.replica_batch_sizes(step);
      replica_seconds_ = stats->replica_seconds;
      reports_.AddStep(step, progress_.epoch, *stats);
    }
    if (evaluates && EvaluatesAfter(assignment.job(), step + 1, session.total_steps())) {
      // Evaluation needs this step's update in place.
      if (!FinishUpdate(session, step + 1)) return;
      EvaluateInto(session, step + 1);
    }
  }
  if (!FinishUpdate(session, session.total_steps())) return;
  if (evaluates && first_step >= session.total_steps()) {
    // A generation formed after the last step (rank 0 restarted at the very end): the
    // final evaluation may never have been reported, so it is done here, on the
    // parameters the shards hold.
    EvaluateInto(session, session.total_steps());
  }
  SetPhase(v1::WORKER_FINISHED);
  LOG(INFO) << "finished all " << session.total_steps() << " steps of job " << assignment.job_id();
}

void WorkerRuntime::RunGeneration(const v1::Assignment& assignment) {
  {
    absl::MutexLock lock(&mu_);
    if (progress_.job_id != assignment.job_id()) {
      // A new job: nothing the worker reported of the last one carries over.
      progress_ = Progress();
      progress_.job_id = assignment.job_id();
    }
    control_.Began(assignment);
    // What is still held belongs to the generation before: its steps may run again.
    reports_.Clear();
    bytes_pushed_.BeginSession();
    bytes_pulled_.BeginSession();
    progress_.phase = v1::WORKER_RENDEZVOUS;
    progress_.generation = assignment.generation();
    progress_.error.clear();
  }
  metrics_.generation.Set(static_cast<double>(assignment.generation()));
  metrics_.StartJob(assignment.job_id());
  JobInputs::Loaded inputs = inputs_.Load(assignment.job(), *link_);
  if (!inputs.status.ok()) {
    LOG(ERROR) << "cannot get the job's " << inputs.what << ": " << inputs.status;
    metrics_.step_failures.Add({{"reason", inputs.failed}}).Increment();
    SetPhase(inputs.fatal ? v1::WORKER_FAILED : v1::WORKER_RENDEZVOUS,
             std::string(inputs.status.message()));
    return;
  }
  if (assignment.devices_size() > 0 && assignment.devices(0).kind() == v1::CPU) {
    // The node's replicas share the cores this process may use (affinity, CPU limit).
    const int cores = UsableCores();
    const int sharing = static_cast<int>(std::max(1u, assignment.replicas())) *
                        static_cast<int>(std::max(1u, assignment.local_world_size()));
    const int threads =
        options_.cpu_threads > 0 ? options_.cpu_threads : std::max(1, cores / sharing);
    engine::SetCpuMatmulThreads(threads);
    if (inputs.model_file != nullptr) engine::SetTorchThreads(threads);
  }
  SessionOptions session_options;
  session_options.coordinator = link_.get();
  session_options.ps_channel = options_.channel;
  session_options.ps_channel.max_receive_bytes = std::max<int64_t>(
      options_.channel.max_receive_bytes, assignment.job().partition_bytes() + (1 << 20));
  session_options.bind_host = options_.bind_host;
  session_options.collective_timeout = options_.collective_timeout;
  session_options.update_timeout = options_.update_timeout;
  session_options.eval_batch_size = options_.eval_batch_size;
  session_options.overlap_updates = options_.overlap_updates;
  session_options.ps_streams_per_shard = options_.ps_streams_per_shard;
  session_options.ps_transport = options_.ps_transport;
  session_options.ps_shared_memory = options_.ps_shared_memory;
  session_options.torchscript_bytes = inputs.model_file;
  session_options.initial_parameters = inputs.initial_parameters;
  session_options.ps_connection = options_.ps_connection;
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::Create(assignment, *inputs.datasets, session_options);
  if (!session.ok()) {
    LOG(ERROR) << "generation " << assignment.generation() << ": " << session.status();
    metrics_.step_failures.Add({{"reason", "setup"}}).Increment();
    const bool fatal = session.status().code() == absl::StatusCode::kInvalidArgument;
    SetPhase(fatal ? v1::WORKER_FAILED : v1::WORKER_RENDEZVOUS,
             std::string(session.status().message()));
    return;
  }
  bytes_pushed_.BeginSession();
  bytes_pulled_.BeginSession();
  {
    absl::MutexLock lock(&mu_);
    active_session_ = session->get();
    InterruptSessionLocked();  // Already overtaken while it was being built.
    reduce_backend_ = (*session)->reduce_backend();
    replica_devices_ = (*session)->replica_devices();
    progress_.steps_per_epoch = (*session)->steps_per_epoch();
    progress_.total_steps = (*session)->total_steps();
  }
  absl::Cleanup forget_session = [this] {
    absl::MutexLock lock(&mu_);
    active_session_ = nullptr;
  };
  absl::StatusOr<uint64_t> first_step = (*session)->Prepare();
  AccountBytes(**session);
  if (!first_step.ok()) {
    LOG(WARNING) << "generation " << assignment.generation()
                 << " could not start: " << first_step.status();
    metrics_.step_failures.Add({{"reason", "prepare"}}).Increment();
    SetPhase(v1::WORKER_RENDEZVOUS, std::string(first_step.status().message()));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    progress_.phase = v1::WORKER_TRAINING;
    progress_.step = *first_step;
    progress_.next_boundary = *first_step;
  }
  LOG(INFO) << "generation " << assignment.generation() << ": training from step " << *first_step
            << " of " << (*session)->total_steps();
  TrainSteps(**session, *first_step);
}

absl::Status WorkerRuntime::Run(ShutdownSignal& shutdown) {
  shutdown_ = &shutdown;
  absl::StatusOr<std::vector<v1::Device>> devices = DiscoverDevices(options_.devices);
  if (!devices.ok()) return devices.status();
  devices_ = *std::move(devices);
  if (link_ == nullptr) {
    absl::StatusOr<std::unique_ptr<GrpcCoordinatorLink>> link =
        GrpcCoordinatorLink::Create(options_.coordinator_address, options_.channel);
    if (!link.ok()) return link.status();
    link_ = *std::move(link);
  }
  if (absl::Status registered = Register(); !registered.ok()) return registered;
  heartbeat_thread_ = std::thread([this] {
    NameThisThread("heartbeat");
    HeartbeatLoop();
  });
  // Shutdown (SIGTERM, Drain) ends a wait for the PS at once.
  std::thread shutdown_watcher([this, &shutdown] {
    shutdown.Wait();
    absl::MutexLock lock(&mu_);
    InterruptSessionLocked();
  });

  while (!shutdown.requested()) {
    WorkerControl::Next what;
    v1::Assignment next;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return control_.NextWork() != WorkerControl::Next::kWait || shutdown.requested();
      };
      // Woken by a heartbeat's answer, or by the shutdown watcher (it takes mu_).
      mu_.Await(absl::Condition(&ready));
      what = control_.NextWork();
      next = control_.pending();
    }
    if (what == WorkerControl::Next::kJobOver) {
      if (options_.exit_after_job) {
        LOG(INFO) << "the job is over; leaving (--exit_after_job)";
        shutdown.Request("job finished");
        break;
      }
      if (!shutdown.requested()) ForgetJob();
      continue;
    }
    if (what == WorkerControl::Next::kRun) RunGeneration(next);
  }

  // Leaving: say goodbye so the coordinator re-forms the generation without waiting
  // for our heartbeats to time out.
  std::string worker_id;
  {
    absl::MutexLock lock(&mu_);
    worker_id = worker_id_;
    if (draining_) progress_.phase = v1::WORKER_DRAINING;
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  shutdown_watcher.join();  // The loop above ends only once shutdown was requested.
  v1::DeregisterRequest request;
  request.set_worker_id(worker_id);
  request.set_reason(shutdown.Wait());
  if (absl::Status left = link_->Deregister(request); !left.ok()) LOG(WARNING) << left;
  return absl::OkStatus();
}

v1::WorkerStatus WorkerRuntime::GetStatus() {
  v1::WorkerStatus status;
  absl::MutexLock lock(&mu_);
  status.set_worker_id(worker_id_);
  status.set_node_name(options_.node_name);
  status.set_phase(draining_ ? v1::WORKER_DRAINING : progress_.phase);
  *status.mutable_assignment() = control_.current();
  // The node credential is this worker's secret, not something to show.
  status.mutable_assignment()->clear_node_credential();
  PutProgress(progress_, status);
  status.set_reduce_seconds(progress_.reduce_seconds);
  status.set_reduce_backend(reduce_backend_);
  for (size_t i = 0; i < replica_devices_.size(); ++i) {
    v1::ReplicaStatus* replica = status.add_replicas();
    replica->set_replica(static_cast<uint32_t>(i));
    if (i < static_cast<size_t>(control_.current().devices_size())) {
      *replica->mutable_device() = control_.current().devices(static_cast<int>(i));
    }
    if (i < replica_batches_.size()) {
      replica->set_batch_size(static_cast<uint32_t>(replica_batches_[i]));
    }
    if (i < replica_seconds_.size()) replica->set_forward_backward_seconds(replica_seconds_[i]);
  }
  status.set_bytes_pushed(bytes_pushed_.total());
  status.set_bytes_pulled(bytes_pulled_.total());
  return status;
}

v1::WorkerPhase WorkerRuntime::Drain(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) LOG(INFO) << "draining: " << reason;
    draining_ = true;
  }
  if (shutdown_ != nullptr) shutdown_->Request(absl::StrCat("drain: ", reason));
  return v1::WORKER_DRAINING;
}

}  // namespace tributary::worker
