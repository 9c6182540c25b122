// The registered workers: who they are, what they last reported, and the checks a
// registration must pass against the others (two explicit requests for one GPU of a
// node are refused). A registration from the endpoint of a known worker is a new
// worker: nothing in it proves it is the same process (node, host, port and pid are
// public in GetClusterStatus), so the old record is only superseded, and goes once it
// has sent no heartbeat for a grace period after that (a restarted worker's old process
// is gone) while a live one stays. Not thread-safe: Coordinator holds its lock around
// every call.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_WORKER_REGISTRY_H_
#define TRIBUTARY_SERVICES_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/assignment.h"

namespace tributary::coordinator {

struct WorkerRecord {
  std::string id;
  uint64_t sequence = 0;  // Registration order.
  v1::RegisterWorkerRequest registration;
  absl::Time registered;
  absl::Time last_heartbeat;
  v1::HeartbeatRequest report;  // The latest heartbeat.
  uint64_t report_number = 0;   // WorkerRegistry::reports_received() when it arrived.
  bool reported = false;
  v1::WorkerPhase phase = v1::WORKER_IDLE;
  std::string failed_job;  // Job in which it reported WORKER_FAILED (ineligible).
  std::string note;        // Why it is outside the generation, or its last error.
  // When another registration came from this worker's endpoint; cleared by its next
  // heartbeat (it is alive). Unset: none.
  std::optional<absl::Time> superseded_since;
};

// "worker w1-ab12cd (node n0)", for messages.
std::string DescribeWorker(const std::string& id, const v1::RegisterWorkerRequest& registration);

class WorkerRegistry {
 public:
  // `incarnation` suffixes every id, so that ids never repeat across restarts.
  explicit WorkerRegistry(std::string incarnation) : incarnation_(std::move(incarnation)) {}

  // Workers registered earlier from the same endpoint (node, host, and gRPC port or
  // pid): perhaps a restarted worker's old record.
  std::vector<std::string> SameEndpoint(const v1::RegisterWorkerRequest& request) const;
  // Marks those as superseded at `now` (another registration came from their endpoint).
  void Supersede(const std::vector<std::string>& ids, absl::Time now);
  // Superseded workers that sent no heartbeat for `grace` since: the processes that a
  // restart replaced.
  std::vector<std::string> Replaced(absl::Time now, absl::Duration grace) const;
  // RESOURCE_EXHAUSTED when another worker of the node explicitly requested one of the
  // GPUs `request` asks for: both requests can never be met. UNAVAILABLE (retry) when
  // that worker is a superseded one, whose GPUs come free once it is known gone.
  absl::Status CheckGpuRequests(const v1::RegisterWorkerRequest& request) const;

  // The id and sequence the next Add gives.
  std::string NextId() const;
  uint64_t NextSequence() const { return next_sequence_; }
  WorkerRecord& Add(const v1::RegisterWorkerRequest& request, absl::Time now);
  void Remove(const std::string& id) { workers_.erase(id); }

  WorkerRecord* Find(const std::string& id);
  const WorkerRecord* Find(const std::string& id) const;

  // Stores a heartbeat as the worker's latest report.
  void RecordReport(WorkerRecord& worker, const v1::HeartbeatRequest& report, absl::Time now);
  uint64_t reports_received() const { return reports_received_; }

  // The workers that may join a generation of `job_id` (empty: no job): not draining,
  // not failed in that job.
  std::vector<Candidate> Candidates(const std::string& job_id) const;
  // Workers not heard of for longer than `timeout`.
  std::vector<std::string> Silent(absl::Time now, absl::Duration timeout) const;
  // Every worker, in registration order.
  std::vector<const WorkerRecord*> BySequence() const;

  std::map<std::string, WorkerRecord>& all() { return workers_; }
  const std::map<std::string, WorkerRecord>& all() const { return workers_; }

 private:
  const std::string incarnation_;
  std::map<std::string, WorkerRecord> workers_;
  uint64_t next_sequence_ = 1;
  uint64_t reports_received_ = 0;
};

// A worker as ListWorkers and the dashboard show it; `assignment` (may be null) is its
// place in the running generation.
v1::WorkerInfo WorkerInfoOf(const WorkerRecord& worker, const v1::Assignment* assignment,
                            absl::Time now);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_WORKER_REGISTRY_H_
