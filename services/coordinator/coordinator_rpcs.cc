// The coordinator's RPCs, one function each (declared once, in coordinator.h): each
// validates its request, computes its answer under the lock from the parts that
// coordinator.h lists, and runs `done` outside the lock.
#include <glog/logging.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "services/coordinator/coordinator.h"

namespace tributary::coordinator {
namespace {

// Free text from callers (heartbeat errors, leave/pause/resume/stop reasons) goes into
// the job's events, its state reason, the state file and the dashboard: at most
// kMaxReasonBytes of it, the rest counted.
constexpr size_t kMaxReasonBytes = 1024;

std::string Clip(const std::string& text) {
  if (text.size() <= kMaxReasonBytes) return text;
  return absl::StrCat(text.substr(0, kMaxReasonBytes), "... (", text.size() - kMaxReasonBytes,
                      " more bytes)");
}

}  // namespace

// ---------------------------------------------------------------------------------
// Workers. Each RPC computes its answer under the lock and runs `done` outside it.

void Coordinator::HandleRegisterWorker(const v1::RegisterWorkerRequest& request,
                                       v1::RegisterWorkerResponse* reply, ReplyCallback done) {
  bool deferred = false;
  const absl::Status status = [&]() -> absl::Status {
    if (absl::Status valid = ValidateRegistration(request); !valid.ok()) return valid;
    absl::MutexLock lock(&mu_);
    // Another process from a known worker's endpoint: a restart, or someone who read the
    // endpoint off GetClusterStatus. It becomes a new worker; the old record goes only
    // if it falls silent (Tick), so that nobody can push a live worker out.
    workers_.Supersede(workers_.SameEndpoint(request), clock_->Now());
    if (absl::Status free = workers_.CheckGpuRequests(request); !free.ok()) return free;
    // With a job running, a worker its node has no GPUs for learns it now.
    v1::Job* job = jobs_.Active();
    if (job != nullptr) {
      std::vector<Candidate> candidates = workers_.Candidates(job->job_id());
      const std::string next_id = workers_.NextId();
      candidates.push_back(Candidate{next_id, workers_.NextSequence(), request});
      GenerationPlan plan = PlanGeneration(job->spec(), candidates);
      auto left_out = plan.left_out.find(next_id);
      if (left_out != plan.left_out.end() && left_out->second.kind == LeftOut::Kind::kTooFewGpus) {
        return absl::ResourceExhaustedError(left_out->second.reason);
      }
    }
    const std::string id = workers_.Add(request, clock_->Now()).id;
    LOG(INFO) << DescribeWorker(id, request) << " registered from " << request.host() << ":"
              << request.grpc_port() << " with " << request.devices_size() << " device(s)";
    reply->set_worker_id(id);
    if (options_.worker_credential) reply->set_worker_credential(options_.worker_credential(id));
    reply->set_heartbeat_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
    RequestWorkLocked();
    // When this registration may complete a generation, answer after the next pass so
    // the assignment comes with the answer.
    deferred = job != nullptr && !generation_.active &&
               (job->state() == v1::PENDING || job->state() == v1::RENDEZVOUS);
    if (deferred) {
      after_tick_.push_back([this, id, reply, done]() {
        {
          absl::MutexLock lock(&mu_);
          if (InGenerationLocked(id)) *reply->mutable_assignment() = generation_.assignments.at(id);
        }
        done(absl::OkStatus());
      });
    }
    return absl::OkStatus();
  }();
  if (!deferred) done(status);
}

void Coordinator::HandleHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* reply,
                                  ReplyCallback done) {
  done([&]() -> absl::Status {
    if (!v1::WorkerPhase_IsValid(request.phase())) {
      return absl::InvalidArgumentError(
          absl::StrCat("phase: unknown worker phase ", static_cast<int>(request.phase())));
    }
    if (absl::Status valid = ValidateHistoryReports(request); !valid.ok()) return valid;
    if (!request.job_id().empty() && !IsJobId(request.job_id())) {
      return absl::InvalidArgumentError(
          absl::StrCat("job_id: \"", request.job_id().substr(0, 160),
                       "\" is not 1-128 characters of [A-Za-z0-9._-]"));
    }
    absl::MutexLock lock(&mu_);
    WorkerRecord* worker = workers_.Find(request.worker_id());
    if (worker == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "unknown worker id '", request.worker_id(),
          "': register again (the coordinator restarted, or removed the worker after missed "
          "heartbeats)"));
    }
    const absl::Time now = clock_->Now();
    workers_.RecordReport(*worker, request, now);
    const std::string id = worker->id;
    const std::string who = DescribeWorker(id, worker->registration);
    const bool current = InGenerationLocked(id) && request.generation() == generation_.number &&
                         (request.job_id().empty() || request.job_id() == generation_.job_id);
    switch (ClassifyReport(request, current, !worker->failed_job.empty())) {
      case ReportKind::kFailed: {
        const std::string error =
            request.error().empty() ? "no error message" : Clip(request.error());
        v1::Job* job = jobs_.Active();
        // A failure counts against the job of the generation it reports, and only
        // while that job runs: a worker still reporting how the last job failed it
        // must not fail the next one.
        const std::string failed_in = JobOfGenerationLocked(request.generation());
        if (job == nullptr || failed_in != job->job_id() ||
            (!request.job_id().empty() && request.job_id() != failed_in)) {
          worker->note = absl::StrCat("failed in an earlier job (",
                                      failed_in.empty() ? "unknown" : failed_in, "): ", error);
          break;
        }
        const bool first_report = worker->failed_job != job->job_id();
        worker->failed_job = job->job_id();
        worker->note = error;
        if (first_report) LOG(WARNING) << who << " failed: " << error;
        ApplySameErrorRuleLocked(id, request.generation(), error);
        if (InGenerationLocked(id)) {
          EndGenerationLocked(absl::StrCat(who, " failed: ", error), "worker_failed", true);
        }
        break;
      }
      case ReportKind::kLeftStep:
        EndGenerationLocked(absl::StrCat(who, " left its step: ", Clip(request.error())),
                            "worker_step_failed", true);
        break;
      case ReportKind::kRecovered:
        worker->failed_job.clear();
        worker->note.clear();
        RequestWorkLocked();
        break;
      case ReportKind::kNormal:
        break;
    }
    RecordHistoryLocked(id, request, now);
    if (InGenerationLocked(id) && request.generation() == generation_.number) {
      UpdateProgressLocked(now);
    }
    if (const WorkerRecord* still = workers_.Find(id)) {
      AnswerHeartbeatLocked(*still, request.generation(), reply);
    }
    return absl::OkStatus();
  }());
}

void Coordinator::AnswerHeartbeatLocked(const WorkerRecord& worker, uint64_t reported_generation,
                                        v1::HeartbeatResponse* reply) {
  reply->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  if (InGenerationLocked(worker.id)) {
    const v1::Assignment& assignment = generation_.assignments.at(worker.id);
    v1::Job* job = jobs_.Find(generation_.job_id);
    if (reported_generation != generation_.number) {
      reply->set_action(v1::ACTION_RENDEZVOUS);
      *reply->mutable_assignment() = assignment;
      reply->set_message(
          absl::StrCat("generation ", generation_.number, ": node ", assignment.node_rank(), " of ",
                       assignment.num_nodes(), ", rank ", assignment.global_rank(), " of ",
                       assignment.world_size(), ", resume at step ", assignment.resume_step()));
    } else if (job != nullptr && job->state() == v1::PAUSED) {
      reply->set_action(v1::ACTION_PAUSE);
      reply->set_message(absl::StrCat("job ", job->job_id(), " paused: ", job->state_reason()));
      if (job->spec().mode() != v1::ASYNC) {
        if (std::optional<uint64_t> boundary = PauseBoundaryLocked()) {
          reply->set_pause_at_step(*boundary);
        }
      }
    } else {
      reply->set_action(v1::ACTION_CONTINUE);
    }
    return;
  }
  const std::string& waiting = planner_.waiting_reason();
  if (reported_generation != 0) {
    auto ended = ended_.find(reported_generation);
    if (ended != ended_.end()) {
      v1::Job* job = jobs_.Find(ended->second.first);
      if (job != nullptr && IsTerminal(job->state())) {
        reply->set_action(v1::ACTION_STOP);
        reply->set_message(absl::StrCat("job ", job->job_id(), " ", v1::JobState_Name(job->state()),
                                        ": ", job->state_reason()));
        return;
      }
      reply->set_action(v1::ACTION_WAIT);
      reply->set_message(absl::StrCat("generation ", reported_generation,
                                      " ended: ", ended->second.second,
                                      waiting.empty() ? "" : absl::StrCat("; ", waiting)));
      return;
    }
  }
  reply->set_action(v1::ACTION_WAIT);
  if (!worker.note.empty()) {
    reply->set_message(worker.note);
  } else if (generation_.active) {
    reply->set_message(absl::StrCat("generation ", generation_.number,
                                    " is running without this worker; it joins at the next "
                                    "generation"));
  } else {
    reply->set_message(waiting);
  }
}

void Coordinator::HandleDeregister(const v1::DeregisterRequest& request,
                                   v1::DeregisterResponse* reply, ReplyCallback done) {
  done([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    const WorkerRecord* worker = workers_.Find(request.worker_id());
    if (worker == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown worker id '", request.worker_id(), "'"));
    }
    const std::string reason =
        absl::StrCat(DescribeWorker(worker->id, worker->registration), " left",
                     request.reason().empty() ? "" : absl::StrCat(": ", Clip(request.reason())));
    LOG(INFO) << reason;
    RemoveWorkerLocked(request.worker_id(), reason, "worker_left", false);
    return absl::OkStatus();
  }());
}

// ---------------------------------------------------------------------------------
// Parameter server shards

void Coordinator::HandleRegisterParameterServer(const v1::RegisterParameterServerRequest& request,
                                                v1::RegisterParameterServerResponse* reply,
                                                ReplyCallback done) {
  done([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<ShardDirectory::Registered> registered =
        shards_.Register(request, clock_->Now());
    if (!registered.ok()) return registered.status();
    const uint32_t shard_index = registered->shard_index;
    const std::string& was = registered->previous_address;
    MarkDirtyLocked(true);
    LOG(INFO) << "PS shard " << shard_index << " registered at " << request.address()
              << (was.empty() ? "" : absl::StrCat(" (was at ", was, ")"));
    if (generation_.active && !was.empty()) {
      // The shard restarted or moved: its in-flight aggregates are gone and its step
      // may have gone back to a checkpoint, so the resume step must be worked out again.
      EndGenerationLocked(
          absl::StrCat("PS shard ", shard_index, " registered again at ", request.address(),
                       was == request.address() ? "" : absl::StrCat(" (was ", was, ")")),
          "shard_registered", false);
    }
    RequestWorkLocked();
    reply->set_shard_index(shard_index);
    reply->set_expected_shards(options_.ps_shards);
    return absl::OkStatus();
  }());
}

// ---------------------------------------------------------------------------------
// Rendezvous

void Coordinator::HandlePublishRendezvous(const v1::PublishRendezvousRequest& request,
                                          v1::PublishRendezvousResponse* reply,
                                          ReplyCallback done) {
  done(rendezvous_.Publish(request.rendezvous_id(), request.key(), request.value()));
}

uint64_t Coordinator::HandleWaitRendezvous(const v1::WaitRendezvousRequest& request,
                                           v1::WaitRendezvousResponse* reply, ReplyCallback done) {
  std::vector<std::string> keys(request.keys().begin(), request.keys().end());
  return rendezvous_.Wait(
      request.rendezvous_id(), keys, absl::Milliseconds(request.timeout_ms()),
      [reply, done = std::move(done)](absl::Status status, std::vector<std::string> values) {
        for (std::string& value : values) reply->add_values(std::move(value));
        done(status);
      });
}

bool Coordinator::CancelWaitRendezvous(uint64_t wait_id) { return rendezvous_.Cancel(wait_id); }

// ---------------------------------------------------------------------------------
// Jobs

void Coordinator::HandleSubmitJob(const v1::SubmitJobRequest& request, v1::Job* reply,
                                  ReplyCallback done) {
  done([&]() -> absl::Status {
    v1::JobSpec spec = WithDefaults(request.spec());
    if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
    }
    if (IsTorchScript(spec.model())) {
      // The workers fetch the file from here: it must be stored before the job exists.
      v1::TorchScriptFile& file = *spec.mutable_model()->mutable_torchscript();
      if (!options_.model_size) {
        return absl::FailedPreconditionError(
            "spec.model: this coordinator stores no model files, so it cannot run torchscript "
            "jobs");
      }
      absl::StatusOr<uint64_t> size = options_.model_size(file.sha256());
      if (!size.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("spec.model.torchscript.sha256: model file ", file.file_name(), ": ",
                         size.status().message()));
      }
      file.set_size_bytes(*size);
    }
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<v1::Job*> job = jobs_.Submit(spec, clock_->Now());
      if (!job.ok()) return job.status();
      planner_.JobSubmitted();
      failure_streak_.Reset();
      *reply = **job;
      RequestWorkLocked();
    }
    SaveState().IgnoreError();
    return absl::OkStatus();
  }());
}

void Coordinator::HandleGetJob(const v1::GetJobRequest& request, v1::Job* reply,
                               ReplyCallback done) {
  done([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    const v1::Job* job = nullptr;
    if (request.job_id().empty()) {
      job = jobs_.Shown();
      if (job == nullptr) return absl::NotFoundError("no job has been submitted");
    } else {
      job = jobs_.Find(request.job_id());
      if (job == nullptr) {
        return absl::NotFoundError(absl::StrCat("unknown job id '", request.job_id(), "'"));
      }
    }
    *reply = *job;
    FillWaitingReason(*reply, generation_.active, planner_.waiting_reason(),
                      shards_.UnreachableNote());
    return absl::OkStatus();
  }());
}

void Coordinator::HandleGetJobHistory(const v1::GetJobHistoryRequest& request,
                                      v1::JobHistory* reply, ReplyCallback done) {
  done([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    const v1::Job* job =
        request.job_id().empty() ? jobs_.Shown() : jobs_.Find(request.job_id());
    if (job == nullptr) {
      return absl::NotFoundError(request.job_id().empty()
                                     ? "no job has been submitted"
                                     : absl::StrCat("unknown job id '", Clip(request.job_id()),
                                                    "'"));
    }
    // A job that has not run a step yet has an empty history.
    *reply = histories_.For(job->job_id()).proto();
    return absl::OkStatus();
  }());
}

void Coordinator::HandleListJobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* reply,
                                 ReplyCallback done) {
  {
    absl::MutexLock lock(&mu_);
    for (auto it = jobs_.jobs().rbegin(); it != jobs_.jobs().rend(); ++it) {
      v1::Job* job = reply->add_jobs();
      *job = *it;
      job->clear_progress();
      FillWaitingReason(*job, generation_.active, planner_.waiting_reason(),
                        shards_.UnreachableNote());
    }
  }
  done(absl::OkStatus());
}

void Coordinator::HandlePauseJob(const v1::JobControlRequest& request, v1::Job* reply,
                                 ReplyCallback done) {
  done([&]() -> absl::Status {
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<v1::Job*> job = jobs_.ControlTarget(request.job_id());
      if (!job.ok()) return job.status();
      if ((*job)->state() != v1::RUNNING && (*job)->state() != v1::RENDEZVOUS) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", (*job)->job_id(), " is ", v1::JobState_Name((*job)->state()),
                         ": only RUNNING or RENDEZVOUS jobs can be paused"));
      }
      jobs_.Transition(
          **job, v1::PAUSED,
          absl::StrCat("paused: ", request.reason().empty() ? "PauseJob" : Clip(request.reason())),
          clock_->Now());
      generation_.pause_at_step.reset();
      generation_.pause_asked_after = workers_.reports_received();
      *reply = **job;
      RequestWorkLocked();
    }
    SaveState().IgnoreError();
    return absl::OkStatus();
  }());
}

void Coordinator::HandleResumeJob(const v1::JobControlRequest& request, v1::Job* reply,
                                  ReplyCallback done) {
  done([&]() -> absl::Status {
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<v1::Job*> job = jobs_.ControlTarget(request.job_id());
      if (!job.ok()) return job.status();
      if ((*job)->state() != v1::PAUSED) {
        return absl::FailedPreconditionError(absl::StrCat("job ", (*job)->job_id(), " is ",
                                                          v1::JobState_Name((*job)->state()),
                                                          ": only a PAUSED job can be resumed"));
      }
      const bool running = generation_.active && generation_.job_id == (*job)->job_id();
      generation_.pause_at_step.reset();
      const std::string why = request.reason().empty() ? "ResumeJob" : Clip(request.reason());
      jobs_.Transition(**job, running ? v1::RUNNING : v1::RENDEZVOUS,
                       running ? absl::StrCat("resumed: ", why)
                               : absl::StrCat("resumed: ", why, "; forming a new generation"),
                       clock_->Now());
      planner_.RestartSettling();
      *reply = **job;
      RequestWorkLocked();
    }
    SaveState().IgnoreError();
    return absl::OkStatus();
  }());
}

void Coordinator::HandleStopJob(const v1::JobControlRequest& request, v1::Job* reply,
                                ReplyCallback done) {
  done([&]() -> absl::Status {
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<v1::Job*> job = jobs_.ControlTarget(request.job_id());
      if (!job.ok()) return job.status();
      if (IsTerminal((*job)->state())) {
        return absl::FailedPreconditionError(absl::StrCat("job ", (*job)->job_id(), " is already ",
                                                          v1::JobState_Name((*job)->state())));
      }
      FinishJobLocked(
          **job, v1::STOPPED,
          absl::StrCat("stopped: ", request.reason().empty() ? "StopJob" : Clip(request.reason())));
      *reply = **job;
    }
    SaveState().IgnoreError();
    return absl::OkStatus();
  }());
}

// ---------------------------------------------------------------------------------
// Cluster picture

StatusInputs Coordinator::StatusInputsLocked() const {
  StatusInputs inputs;
  inputs.jobs = &jobs_;
  inputs.workers = &workers_;
  inputs.shards = &shards_;
  inputs.generation = &generation_;
  inputs.waiting_reason = planner_.waiting_reason();
  inputs.version = options_.version;
  inputs.straggler_factor = options_.straggler_factor;
  return inputs;
}

void Coordinator::HandleListWorkers(const v1::ListWorkersRequest& request,
                                    v1::ListWorkersResponse* reply, ReplyCallback done) {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (const WorkerRecord* worker : workers_.BySequence()) {
      const v1::Assignment* assignment =
          InGenerationLocked(worker->id) ? &generation_.assignments.at(worker->id) : nullptr;
      *reply->add_workers() = WorkerInfoOf(*worker, assignment, now);
    }
  }
  done(absl::OkStatus());
}

void Coordinator::HandleGetClusterStatus(const v1::GetClusterStatusRequest& request,
                                         v1::ClusterStatus* reply, ReplyCallback done) {
  *reply = GetClusterStatus();
  done(absl::OkStatus());
}

v1::ClusterStatus Coordinator::GetClusterStatus() {
  absl::MutexLock lock(&mu_);
  return ClusterStatusOf(StatusInputsLocked(), clock_->Now());
}

}  // namespace tributary::coordinator
