#include "services/parameter_server/shard_test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/partition_plan.h"
#include "common/wire_dtype.h"

namespace tributary::ps::testing {

v1::OptimizerSpec Sgd(float learning_rate) {
  v1::OptimizerSpec optimizer;
  optimizer.set_type(v1::SGD);
  optimizer.set_learning_rate(learning_rate);
  optimizer.mutable_schedule()->set_kind(v1::CONSTANT);
  return optimizer;
}

v1::JobSpec MakeSpec(v1::TrainingMode mode, v1::OptimizerSpec optimizer, uint32_t nodes) {
  v1::JobSpec spec;
  spec.set_mode(mode);
  *spec.mutable_optimizer() = std::move(optimizer);
  spec.set_nodes_min(nodes);
  spec.set_partition_bytes(256);
  spec.set_partition_cut(v1::CUT_EVEN);  // As a worker's assignment names it.
  spec.set_max_steps(100);
  if (mode == v1::BOUNDED_STALENESS) spec.set_staleness(1);
  return spec;
}

v1::InitHeader MakeHeader(const v1::JobSpec& spec, int64_t elements, uint32_t num_shards,
                          uint32_t shard, const std::string& job_id, uint64_t total_steps) {
  v1::ParameterLayout layout;
  v1::TensorView* tensor = layout.add_tensors();
  tensor->set_name("weights");
  tensor->add_shape(elements);
  tensor->set_length(elements);
  layout.set_total_elements(elements);
  const int64_t partition_bytes = spec.partition_bytes() == 0 ? 256 : spec.partition_bytes();
  v1::InitHeader header;
  header.set_job_id(job_id);
  *header.mutable_job() = spec;
  *header.mutable_plan() = *MakePartitionPlan(layout, partition_bytes, num_shards);
  header.set_shard_index(shard);
  header.set_total_steps(total_steps);
  return header;
}

v1::InitHeader MakeHeaderWithBuffers(const v1::JobSpec& spec, int64_t trained, int64_t buffers,
                                     uint32_t num_shards, uint32_t shard) {
  v1::ParameterLayout layout;
  v1::TensorView* weights = layout.add_tensors();
  weights->set_name("weights");
  weights->add_shape(trained);
  weights->set_length(trained);
  v1::TensorView* stats = layout.add_tensors();
  stats->set_name("running_stats");
  stats->add_shape(buffers);
  stats->set_offset(trained);
  stats->set_length(buffers);
  stats->set_buffer(true);
  layout.set_total_elements(trained + buffers);
  v1::InitHeader header;
  header.set_job_id("job-1");
  *header.mutable_job() = spec;
  *header.mutable_plan() =
      *MakePartitionPlan(layout, spec.partition_bytes() == 0 ? 256 : spec.partition_bytes(),
                         num_shards);
  header.set_shard_index(shard);
  header.set_total_steps(100);
  return header;
}

const v1::Partition& PartitionOf(const v1::PartitionPlan& plan, uint32_t id) {
  return plan.partitions(static_cast<int>(id));
}

std::vector<v1::PartitionValues> InitialValues(const v1::InitHeader& header,
                                               const std::vector<float>& initial) {
  std::vector<v1::PartitionValues> values;
  for (const v1::Partition& partition : header.plan().partitions()) {
    if (partition.shard() != header.shard_index()) continue;
    v1::PartitionValues value;
    value.set_partition_id(partition.id());
    value.set_dtype(v1::FLOAT32);
    value.set_data(std::string(reinterpret_cast<const char*>(initial.data() + partition.offset()),
                               partition.length() * 4));
    values.push_back(std::move(value));
  }
  return values;
}

v1::GradientPush MakePush(const v1::InitHeader& header, uint64_t generation, uint64_t step,
                          uint32_t node, uint32_t partition, const std::vector<float>& flat,
                          uint64_t samples, v1::DType dtype) {
  const v1::Partition& spec = PartitionOf(header.plan(), partition);
  v1::GradientPush push;
  push.set_job_id(header.job_id());
  push.set_generation(generation);
  push.set_step(step);
  push.set_node_rank(node);
  push.set_partition_id(partition);
  push.set_dtype(dtype);
  push.set_sample_count(samples);
  std::string data(spec.length() * WireBytes(dtype), '\0');
  NarrowInto(dtype, flat.data() + spec.offset(), spec.length(), data.data());
  push.set_data(std::move(data));
  return push;
}

std::vector<float> FloatsOf(const v1::PartitionValues& values) {
  std::vector<float> floats(values.data().size() / 4);
  std::memcpy(floats.data(), values.data().data(), floats.size() * 4);
  return floats;
}

void RecordingSink::Deliver(std::shared_ptr<const v1::PartitionValues> values) {
  absl::MutexLock lock(&mu_);
  delivered_.push_back(std::move(values));
}

void RecordingSink::Retry(uint32_t partition_id) {
  absl::MutexLock lock(&mu_);
  retries_.push_back(partition_id);
}

void RecordingSink::End(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ended_ = status;
  ++ended_count_;
}

std::vector<std::shared_ptr<const v1::PartitionValues>> RecordingSink::delivered() const {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

std::vector<uint32_t> RecordingSink::retries() const {
  absl::MutexLock lock(&mu_);
  return retries_;
}

absl::Status RecordingSink::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

int RecordingSink::ended_count() const {
  absl::MutexLock lock(&mu_);
  return ended_count_;
}

std::shared_ptr<const v1::PartitionValues> RecordingSink::Last(uint32_t partition) const {
  absl::MutexLock lock(&mu_);
  for (auto it = delivered_.rbegin(); it != delivered_.rend(); ++it) {
    if ((*it)->partition_id() == partition) return *it;
  }
  return nullptr;
}

std::string FreshTempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tributary::ps::testing
