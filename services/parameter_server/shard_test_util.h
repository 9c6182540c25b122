// Test helpers shared by the shard's tests: small jobs with a real partition plan,
// initial values, gradient pushes and a sink that records what the shard sends.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_TEST_UTIL_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/parameter_shard.h"

namespace tributary::ps::testing {

// A job over a flat buffer of `elements` floats (one tensor), cut into partitions of
// partition_bytes over num_shards shards; the header addresses `shard`.
v1::InitHeader MakeHeader(const v1::JobSpec& spec, int64_t elements, uint32_t num_shards,
                          uint32_t shard, const std::string& job_id = "job-1",
                          uint64_t total_steps = 100);

// A layout of `trained` parameter elements, then `buffers` buffer elements (one
// tensor each), so the plan ends in buffer partitions.
v1::InitHeader MakeHeaderWithBuffers(const v1::JobSpec& spec, int64_t trained, int64_t buffers,
                                     uint32_t num_shards, uint32_t shard);

// A spec with the given mode, optimizer and node count (partition_bytes 256).
v1::JobSpec MakeSpec(v1::TrainingMode mode, v1::OptimizerSpec optimizer, uint32_t nodes);
v1::OptimizerSpec Sgd(float learning_rate);

// Initial values for the header's shard, taken from the flat buffer `initial`.
std::vector<v1::PartitionValues> InitialValues(const v1::InitHeader& header,
                                               const std::vector<float>& initial);

const v1::Partition& PartitionOf(const v1::PartitionPlan& plan, uint32_t id);

// The gradient slice of partition `id` of the flat gradient `flat`, in `dtype`.
v1::GradientPush MakePush(const v1::InitHeader& header, uint64_t generation, uint64_t step,
                          uint32_t node, uint32_t partition, const std::vector<float>& flat,
                          uint64_t samples, v1::DType dtype = v1::FLOAT32);

std::vector<float> FloatsOf(const v1::PartitionValues& values);

class RecordingSink : public NodeSink {
 public:
  void Deliver(std::shared_ptr<const v1::PartitionValues> values) override;
  void Retry(uint32_t partition_id) override;
  void End(const absl::Status& status) override;

  std::vector<std::shared_ptr<const v1::PartitionValues>> delivered() const;
  std::vector<uint32_t> retries() const;
  absl::Status ended() const;  // OK until End() was called.
  int ended_count() const;
  // The last values delivered for a partition (null when none).
  std::shared_ptr<const v1::PartitionValues> Last(uint32_t partition) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<const v1::PartitionValues>> delivered_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> retries_ ABSL_GUARDED_BY(mu_);
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  int ended_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// $TEST_TMPDIR/<name>, emptied.
std::string FreshTempDir(const std::string& name);

}  // namespace tributary::ps::testing

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_SHARD_TEST_UTIL_H_
