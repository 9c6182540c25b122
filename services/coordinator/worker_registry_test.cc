#include "services/coordinator/worker_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::RegisterWorkerRequest Worker(const std::string& node, uint32_t port, uint32_t pid = 0) {
  v1::RegisterWorkerRequest request;
  request.set_node_name(node);
  request.set_host("10.0.0.1");
  request.set_grpc_port(port);
  request.set_pid(pid);
  return request;
}

v1::RegisterWorkerRequest GpuWorker(const std::string& node, uint32_t port, int gpu) {
  v1::RegisterWorkerRequest request = Worker(node, port);
  v1::Device* device = request.add_devices();
  device->set_kind(v1::GPU);
  device->set_index(gpu);
  device->set_uuid("GPU-" + node + "-" + std::to_string(gpu));
  request.add_requested_gpus(gpu);
  return request;
}

TEST(WorkerRegistryTest, IdsCarryTheSequenceAndTheIncarnation) {
  WorkerRegistry registry("abc123");
  EXPECT_EQ(registry.NextId(), "w1-abc123");
  WorkerRecord& first = registry.Add(Worker("n0", 5000), kT0);
  EXPECT_EQ(first.id, "w1-abc123");
  EXPECT_EQ(first.sequence, 1u);
  EXPECT_EQ(first.last_heartbeat, kT0);
  EXPECT_EQ(registry.Add(Worker("n0", 5001), kT0).id, "w2-abc123");
  registry.Remove("w1-abc123");
  // Ids never come back.
  EXPECT_EQ(registry.Add(Worker("n0", 5000), kT0).id, "w3-abc123");
  EXPECT_EQ(registry.Find("w1-abc123"), nullptr);
}

TEST(WorkerRegistryTest, SameEndpointIsSameNodeHostAndPortOrPid) {
  WorkerRegistry registry("x");
  registry.Add(Worker("n0", 5000, 77), kT0);
  EXPECT_THAT(registry.SameEndpoint(Worker("n0", 5000)), ElementsAre("w1-x"));
  EXPECT_THAT(registry.SameEndpoint(Worker("n0", 6000, 77)), ElementsAre("w1-x"));
  EXPECT_THAT(registry.SameEndpoint(Worker("n0", 6000, 78)), IsEmpty());
  EXPECT_THAT(registry.SameEndpoint(Worker("n1", 5000, 77)), IsEmpty());
  // Port 0 and pid 0 mean "unknown", never a match.
  EXPECT_THAT(registry.SameEndpoint(Worker("n0", 0, 0)), IsEmpty());
}

TEST(WorkerRegistryTest, TwoRequestsForOneGpuOfANodeAreRefused) {
  WorkerRegistry registry("x");
  registry.Add(GpuWorker("n0", 5000, 1), kT0);
  absl::Status clash = registry.CheckGpuRequests(GpuWorker("n0", 5001, 1));
  EXPECT_EQ(clash.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(clash.message(), HasSubstr("GPU 1"));
  EXPECT_THAT(clash.message(), HasSubstr("already requested by worker w1-x"));
  EXPECT_TRUE(registry.CheckGpuRequests(GpuWorker("n0", 5001, 0)).ok());
  EXPECT_TRUE(registry.CheckGpuRequests(GpuWorker("n1", 5001, 1)).ok());
}

TEST(WorkerRegistryTest, ReportsAreNumberedAndSilenceIsMeasured) {
  WorkerRegistry registry("x");
  WorkerRecord& a = registry.Add(Worker("n0", 5000), kT0);
  registry.Add(Worker("n0", 5001), kT0);
  v1::HeartbeatRequest report;
  report.set_phase(v1::WORKER_TRAINING);
  report.set_step(12);
  registry.RecordReport(a, report, kT0 + absl::Seconds(8));
  EXPECT_EQ(a.report_number, 1u);
  EXPECT_EQ(registry.reports_received(), 1u);
  EXPECT_TRUE(a.reported);
  EXPECT_EQ(a.phase, v1::WORKER_TRAINING);
  EXPECT_THAT(registry.Silent(kT0 + absl::Seconds(11), absl::Seconds(10)), ElementsAre("w2-x"));
  EXPECT_THAT(registry.Silent(kT0 + absl::Seconds(19), absl::Seconds(10)),
              ElementsAre("w1-x", "w2-x"));
}

TEST(WorkerRegistryTest, CandidatesLeaveOutDrainingAndFailedWorkers) {
  WorkerRegistry registry("x");
  registry.Add(Worker("n0", 5000), kT0);
  registry.Add(Worker("n0", 5001), kT0).phase = v1::WORKER_DRAINING;
  registry.Add(Worker("n0", 5002), kT0).failed_job = "job-1";
  std::vector<std::string> ids;
  for (const Candidate& candidate : registry.Candidates("job-1"))
    ids.push_back(candidate.worker_id);
  EXPECT_THAT(ids, ElementsAre("w1-x"));
  ids.clear();
  for (const Candidate& candidate : registry.Candidates("job-2"))
    ids.push_back(candidate.worker_id);
  EXPECT_THAT(ids, ElementsAre("w1-x", "w3-x"));
}

TEST(WorkerRegistryTest, BySequenceIsRegistrationOrder) {
  WorkerRegistry registry("x");
  for (int i = 0; i < 11; ++i) registry.Add(Worker("n0", 5000 + i), kT0);
  std::vector<uint64_t> sequences;
  for (const WorkerRecord* worker : registry.BySequence()) sequences.push_back(worker->sequence);
  // "w10-x" sorts before "w2-x" as a string; the view follows registration order.
  EXPECT_EQ(sequences, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(WorkerInfoOfTest, ShowsTheReportTheNoteAndTheAssignmentWithoutTheJob) {
  WorkerRegistry registry("x");
  WorkerRecord& worker = registry.Add(Worker("n0", 5000, 42), kT0);
  worker.note = "no free GPU";
  v1::Assignment assignment;
  assignment.set_global_rank(3);
  assignment.mutable_job()->set_name("big job");
  v1::WorkerInfo info = WorkerInfoOf(worker, &assignment, kT0 + absl::Seconds(2));
  EXPECT_EQ(info.worker_id(), "w1-x");
  EXPECT_EQ(info.pid(), 42u);
  EXPECT_EQ(info.assignment().global_rank(), 3u);
  EXPECT_FALSE(info.assignment().has_job());
  EXPECT_DOUBLE_EQ(info.heartbeat_age_seconds(), 2.0);
  EXPECT_EQ(info.error(), "no free GPU");
  worker.report.set_error("allreduce failed");
  EXPECT_EQ(WorkerInfoOf(worker, nullptr, kT0).error(), "allreduce failed");
  EXPECT_FALSE(WorkerInfoOf(worker, nullptr, kT0).has_assignment());
}

}  // namespace
}  // namespace tributary::coordinator
