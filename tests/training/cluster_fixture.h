// Test helpers for multi-process tests: a LocalCluster of the real binaries (found
// through the test's runfiles), job submission, waiting with a clear failure
// message, and the shards' status.
#ifndef TRIBUTARY_TESTS_TRAINING_CLUSTER_FIXTURE_H_
#define TRIBUTARY_TESTS_TRAINING_CLUSTER_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/local_cluster.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"

namespace tributary::testing {

struct ClusterShape {
  int ps_shards = 2;
  int workers = 2;
  int nodes = 0;  // 0 = one node per worker.
  std::vector<std::string> coordinator_args;
  std::vector<std::string> ps_args;
  std::vector<std::string> worker_args;
};

// Starts the cluster under $TEST_TMPDIR/<name>, with test-friendly timeouts
// (heartbeat 200ms, timeout 3s, settle 100ms). Fails the test when it cannot start.
std::unique_ptr<cli::LocalCluster> StartCluster(const std::string& name,
                                                const ClusterShape& shape);

absl::StatusOr<v1::Job> SubmitJob(cli::LocalCluster& cluster, const v1::JobSpec& spec);

// Polls GetJob until `done(job)` or the timeout; the error says the job's last state,
// its events and any process that died.
absl::StatusOr<v1::Job> WaitForJob(cli::LocalCluster& cluster, const std::string& job_id,
                                   const std::function<bool(const v1::Job&)>& done,
                                   absl::Duration timeout);

// A job in a terminal state.
bool Finished(const v1::Job& job);

// Submits `spec` and waits (3 minutes at most) until the job ends: the job as it ended,
// or an empty one after a failure of the test (submission refused, never ended).
v1::Job RunToTheEnd(cli::LocalCluster& cluster, const v1::JobSpec& spec);

absl::StatusOr<std::vector<v1::ShardStatus>> ShardStatuses(cli::LocalCluster& cluster);

// Waits until the job has passed `min_step` with every PS shard training it with
// `nodes` nodes in one generation (a node may join a moment after the others formed
// one); a test that kills a node waits for this first.
absl::StatusOr<v1::Job> WaitForNodes(cli::LocalCluster& cluster, const std::string& job_id,
                                     uint32_t nodes, uint64_t min_step, absl::Duration timeout);

// A small synthetic job: quick to load, no files needed.
v1::JobSpec SyntheticJob(uint32_t batch, uint64_t steps);

// The single-replica reference: `spec` trained by one replica alone for `steps` steps
// (what SYNC on any cluster must equal, up to the order of float additions).
std::vector<float> ReferenceParameters(const v1::JobSpec& spec, uint64_t steps);

// Largest |a - b| over the elements divided by the largest |b|.
double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_TRAINING_CLUSTER_FIXTURE_H_
