#include "services/coordinator/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "services/coordinator/failure_policy.h"

namespace tributary::coordinator {

std::string DescribeWorker(const std::string& id, const v1::RegisterWorkerRequest& registration) {
  return absl::StrCat("worker ", id, " (node ", registration.node_name(), ")");
}

std::vector<std::string> WorkerRegistry::SameEndpoint(
    const v1::RegisterWorkerRequest& request) const {
  std::vector<std::string> same;
  for (const auto& [id, other] : workers_) {
    const v1::RegisterWorkerRequest& old = other.registration;
    if (old.node_name() != request.node_name() || old.host() != request.host()) continue;
    if ((request.grpc_port() != 0 && old.grpc_port() == request.grpc_port()) ||
        (request.pid() != 0 && old.pid() == request.pid())) {
      same.push_back(id);
    }
  }
  return same;
}

void WorkerRegistry::Supersede(const std::vector<std::string>& ids, absl::Time now) {
  for (const std::string& id : ids) {
    WorkerRecord* worker = Find(id);
    if (worker == nullptr || worker->superseded_since.has_value()) continue;
    worker->superseded_since = now;
  }
}

std::vector<std::string> WorkerRegistry::Replaced(absl::Time now, absl::Duration grace) const {
  std::vector<std::string> replaced;
  for (const auto& [id, worker] : workers_) {
    if (worker.superseded_since.has_value() && now - *worker.superseded_since > grace) {
      replaced.push_back(id);
    }
  }
  return replaced;
}

absl::Status WorkerRegistry::CheckGpuRequests(const v1::RegisterWorkerRequest& request) const {
  for (int32_t index : request.requested_gpus()) {
    v1::Device wanted;
    for (const v1::Device& device : request.devices()) {
      if (device.kind() == v1::GPU && device.index() == index) wanted = device;
    }
    for (const auto& [other_id, other] : workers_) {
      if (other.registration.node_name() != request.node_name()) continue;
      for (int32_t other_index : other.registration.requested_gpus()) {
        for (const v1::Device& device : other.registration.devices()) {
          if (device.kind() == v1::GPU && device.index() == other_index &&
              GpuKey(device) == GpuKey(wanted)) {
            if (other.superseded_since.has_value()) {
              return absl::UnavailableError(absl::StrCat(
                  "node ", request.node_name(), ": ", DescribeGpu(wanted),
                  " is requested by worker ", other_id,
                  ", registered before from this endpoint; it is free once that worker is "
                  "known gone (no heartbeat within seconds): retry"));
            }
            return absl::ResourceExhaustedError(absl::StrCat(
                "node ", request.node_name(), ": ", DescribeGpu(wanted),
                " is already requested by worker ", other_id, "; no free GPU for this request"));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string WorkerRegistry::NextId() const {
  return absl::StrCat("w", next_sequence_, "-", incarnation_);
}

WorkerRecord& WorkerRegistry::Add(const v1::RegisterWorkerRequest& request, absl::Time now) {
  WorkerRecord record;
  record.id = NextId();
  record.sequence = next_sequence_++;
  record.registration = request;
  record.registered = now;
  record.last_heartbeat = now;
  const std::string id = record.id;
  return workers_.insert_or_assign(id, std::move(record)).first->second;
}

WorkerRecord* WorkerRegistry::Find(const std::string& id) {
  auto found = workers_.find(id);
  return found == workers_.end() ? nullptr : &found->second;
}

const WorkerRecord* WorkerRegistry::Find(const std::string& id) const {
  auto found = workers_.find(id);
  return found == workers_.end() ? nullptr : &found->second;
}

void WorkerRegistry::RecordReport(WorkerRecord& worker, const v1::HeartbeatRequest& report,
                                  absl::Time now) {
  worker.last_heartbeat = now;
  worker.superseded_since.reset();  // Alive: the other registration is another worker.
  worker.report = report;
  worker.report_number = ++reports_received_;
  worker.reported = true;
  worker.phase = report.phase();
}

std::vector<Candidate> WorkerRegistry::Candidates(const std::string& job_id) const {
  std::vector<Candidate> candidates;
  for (const auto& [id, worker] : workers_) {
    if (worker.phase == v1::WORKER_DRAINING) continue;
    // Until it heartbeats again, perhaps the process a restart replaced.
    if (worker.superseded_since.has_value()) continue;
    if (!job_id.empty() && worker.failed_job == job_id) continue;
    candidates.push_back(Candidate{id, worker.sequence, worker.registration});
  }
  return candidates;
}

std::vector<std::string> WorkerRegistry::Silent(absl::Time now, absl::Duration timeout) const {
  std::vector<std::string> silent;
  for (const auto& [id, worker] : workers_) {
    if (MissedHeartbeats(worker.last_heartbeat, now, timeout)) silent.push_back(id);
  }
  return silent;
}

std::vector<const WorkerRecord*> WorkerRegistry::BySequence() const {
  std::vector<const WorkerRecord*> ordered;
  for (const auto& [id, worker] : workers_) ordered.push_back(&worker);
  std::sort(ordered.begin(), ordered.end(),
            [](const WorkerRecord* a, const WorkerRecord* b) { return a->sequence < b->sequence; });
  return ordered;
}

v1::WorkerInfo WorkerInfoOf(const WorkerRecord& worker, const v1::Assignment* assignment,
                            absl::Time now) {
  v1::WorkerInfo info;
  const v1::RegisterWorkerRequest& registration = worker.registration;
  info.set_worker_id(worker.id);
  info.set_node_name(registration.node_name());
  info.set_host(registration.host());
  info.set_grpc_port(registration.grpc_port());
  info.set_http_port(registration.http_port());
  *info.mutable_devices() = registration.devices();
  if (assignment != nullptr) {
    *info.mutable_assignment() = *assignment;
    info.mutable_assignment()->clear_job();  // The job is shown once, not per worker.
    info.mutable_assignment()->clear_node_credential();  // A secret of that worker's.
  }
  info.set_phase(worker.phase);
  info.set_heartbeat_age_seconds(absl::ToDoubleSeconds(now - worker.last_heartbeat));
  info.set_step(worker.report.step());
  info.set_loss(worker.report.loss());
  info.set_samples_per_second(worker.report.samples_per_second());
  info.set_step_seconds(worker.report.step_seconds());
  info.set_push_wait_seconds(worker.report.push_wait_seconds());
  info.set_error(!worker.report.error().empty() ? worker.report.error() : worker.note);
  *info.mutable_registered() = ToProto(worker.registered);
  info.set_bytes_pushed(worker.report.bytes_pushed());
  info.set_bytes_pulled(worker.report.bytes_pulled());
  info.set_pid(registration.pid());
  return info;
}

}  // namespace tributary::coordinator
