#include "services/parameter_server/shard_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "services/parameter_server/aggregator.h"

namespace tributary::ps {

ShardPartition::ShardPartition(const v1::Partition& spec, uint32_t num_nodes)
    : id(spec.id()),
      offset(spec.offset()),
      length(static_cast<size_t>(spec.length())),
      buffers(spec.buffers()) {
  absl::MutexLock lock(&mu);
  sum.resize(length);
  ResetNodes(num_nodes);
  // Values each node's stream may still hold, plus current and previous ones.
  spares.reserve(num_nodes + 2);
}

void ShardPartition::Retire(std::shared_ptr<v1::PartitionValues> old) {
  if (old != nullptr && spares.size() < spares.capacity()) spares.push_back(std::move(old));
}

void ShardPartition::ResetNodes(uint32_t num_nodes) {
  pushed.assign(num_nodes, 0);
  pushed_count = 0;
  samples = 0;
  non_finite_nodes.clear();
  has_pushed.assign(num_nodes, 0);
  last_step.assign(num_nodes, 0);
  held.clear();
}

std::shared_ptr<v1::PartitionValues> ShardPartition::FreshValues() {
  std::shared_ptr<v1::PartitionValues> next;
  for (auto it = spares.begin(); it != spares.end(); ++it) {
    if (it->use_count() == 1) {  // Nobody is sending it any more: reuse its buffer.
      next = std::move(*it);
      *it = std::move(spares.back());
      spares.pop_back();
      break;
    }
  }
  if (next == nullptr) {
    next = std::make_shared<v1::PartitionValues>();
    next->set_partition_id(id);
    next->set_dtype(v1::FLOAT32);
  }
  // A reused buffer has the size already: nothing is written here (the update's one
  // pass writes every element).
  next->mutable_data()->resize(length * sizeof(float));
  next->set_version(values->version());
  next->set_step(values->step());
  return next;
}

ShardJob::ShardJob(Optimizer optimizer) : optimizer(std::move(optimizer)) {}
ShardJob::~ShardJob() = default;

absl::StatusOr<std::unique_ptr<ShardJob>> BuildShardJob(JobSource source, Optimizer optimizer,
                                                        std::unique_ptr<Aggregator> aggregator) {
  auto job = std::make_unique<ShardJob>(std::move(optimizer));
  job->job_id = std::move(source.job_id);
  job->spec = std::move(source.spec);
  job->plan = std::move(source.plan);
  job->total_steps = source.total_steps;
  job->shard_index = source.shard_index;
  job->generation = source.generation;
  job->num_nodes = source.num_nodes;
  job->mode = job->spec.mode();
  job->staleness = job->spec.staleness();
  job->wire_dtype = job->spec.wire_dtype();
  job->aggregator = std::move(aggregator);
  const size_t slots = static_cast<size_t>(job->optimizer.state_slots());
  for (JobSource::Seed& seed : source.partitions) {
    auto partition = std::make_unique<ShardPartition>(seed.partition, job->num_nodes);
    ShardPartition& p = *partition;
    absl::MutexLock lock(&p.mu);
    if (seed.state.empty()) seed.state.assign(p.length * slots, 0.0f);
    if (seed.state.size() != p.length * slots) {
      return absl::InvalidArgumentError(absl::StrCat("partition ", p.id, ": optimizer state of ",
                                                     seed.state.size(), " floats, expected ",
                                                     p.length * slots));
    }
    p.values = std::move(seed.values);
    p.values->set_partition_id(p.id);
    p.state = std::move(seed.state);
    p.step = seed.step;
    p.generation_start_step = seed.step;
    p.skipped_non_finite = seed.skipped_non_finite;
    job->by_id[p.id] = partition.get();
    job->partitions.push_back(std::move(partition));
  }
  return job;
}

std::string PlanName(const v1::PartitionPlan& plan) {
  return absl::StrCat("plan ", plan.fingerprint());
}

}  // namespace tributary::ps
