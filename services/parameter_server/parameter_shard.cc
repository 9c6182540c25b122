#include "services/parameter_server/parameter_shard.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/partition_plan.h"
#include "common/wire_dtype.h"

namespace tributary::ps {
namespace {

const Clock* RealClockInstance() {
  static const RealClock* clock = new RealClock();
  return clock;
}

}  // namespace

ParameterShard::ParameterShard(ShardOptions options, std::shared_ptr<prometheus::Registry> registry)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClockInstance()),
      registry_(registry != nullptr ? std::move(registry)
                                    : std::make_shared<prometheus::Registry>()),
      metrics_(*registry_),
      shard_index_(options_.shard_index),
      checkpointer_(options_.checkpoints_to_keep, metrics_, clock_,
                    [this](uint64_t step) { return PeriodicSnapshot(step); }) {}

ParameterShard::~ParameterShard() = default;

int ParameterShard::shard_index() const {
  absl::ReaderMutexLock lock(&mu_);
  return shard_index_;
}

absl::Status ParameterShard::set_shard_index(uint32_t index) {
  absl::MutexLock lock(&mu_);
  if (job_ != nullptr && job_->shard_index != index) {
    return absl::FailedPreconditionError(absl::StrCat("shard holds job '", job_->job_id,
                                                      "' as shard ", job_->shard_index,
                                                      "; cannot become shard ", index));
  }
  if (shard_index_ >= 0 && static_cast<uint32_t>(shard_index_) != index) {
    LOG(WARNING) << "shard index changes from " << shard_index_ << " to " << index;
  }
  shard_index_ = static_cast<int>(index);
  return absl::OkStatus();
}

AggregatorContext ParameterShard::Context() {
  AggregatorContext context;
  context.metrics = &metrics_;
  context.sinks = &sinks_;
  context.clock = clock_;
  context.step_moved = [this](ShardPartition& p, uint64_t from, uint64_t to) {
    MovePartitionStep(p, from, to);
  };
  return context;
}

void ParameterShard::InstallLocked(std::unique_ptr<ShardJob> job) {
  shard_index_ = static_cast<int>(job->shard_index);
  job_ = std::move(job);
  job_->periodic_checkpoints =
      job_->spec.checkpoint_interval_steps() > 0 && !CheckpointDirLocked().empty();
  ended_job_.reset();
  sinks_.Reset(job_->num_nodes);
  ResetStepTracking();
  metrics_.generation.Set(static_cast<double>(job_->generation));
  metrics_.partitions.Set(static_cast<double>(job_->partitions.size()));
}

// ---------------------------------------------------------------------------------
// Push

absl::StatusOr<PushResult> ParameterShard::Push(const GradientPushView& push, NodeSink* sink) {
  absl::StatusOr<PushResult> result = PushLocked(push, sink);
  // Periodic checkpoints wait for the writer, not the other way round: a push that
  // finds too many of them queued waits (holding no lock), so the partitions' captures
  // stay few and every checkpoint step gets written on every shard.
  checkpointer_.AwaitBacklogAtMost(kMaxCheckpointBacklog);
  return result;
}

absl::Status ParameterShard::CheckNodeLocked(absl::string_view job_id, uint64_t generation,
                                             uint32_t node_rank, RejectReason* reason) const {
  if (job_ == nullptr) {
    *reason = RejectReason::kNoJob;
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "': shard ", shard_index_,
                                                      " holds no job (InitPartitions first)"));
  }
  const ShardJob& job = *job_;
  if (job_id != job.job_id) {
    *reason = RejectReason::kWrongJob;
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' but shard ",
                                                      job.shard_index, " holds job '", job.job_id,
                                                      "'"));
  }
  if (generation < job.generation) {
    *reason = RejectReason::kStaleGeneration;
    return absl::FailedPreconditionError(absl::StrCat("stale generation ", generation,
                                                      " from node ", node_rank,
                                                      ": the current generation is ",
                                                      job.generation));
  }
  if (generation > job.generation) {
    *reason = RejectReason::kFutureGeneration;
    return absl::UnavailableError(absl::StrCat("generation ", generation,
                                               " has not begun on shard ", job.shard_index,
                                               " (current generation ", job.generation,
                                               "); retry"));
  }
  if (node_rank >= job.num_nodes) {
    *reason = RejectReason::kBadNodeRank;
    return absl::InvalidArgumentError(absl::StrCat("node_rank ", node_rank,
                                                   " is not in generation ", job.generation,
                                                   " of ", job.num_nodes, " nodes"));
  }
  return absl::OkStatus();
}

absl::Status ParameterShard::CheckNode(absl::string_view job_id, uint64_t generation,
                                       uint32_t node_rank) const {
  absl::ReaderMutexLock lock(&mu_);
  RejectReason reason;
  return CheckNodeLocked(job_id, generation, node_rank, &reason);
}

absl::StatusOr<PushResult> ParameterShard::PushLocked(const GradientPushView& push,
                                                      NodeSink* sink) {
  absl::ReaderMutexLock lock(&mu_);
  auto reject = [this](RejectReason reason, absl::Status status) {
    return CountRejection(metrics_, reason, std::move(status));
  };
  RejectReason reason;
  if (absl::Status node = CheckNodeLocked(push.job_id, push.generation, push.node_rank, &reason);
      !node.ok()) {
    return reject(reason, std::move(node));
  }
  const ShardJob& job = *job_;
  auto found = job.by_id.find(push.partition_id);
  if (found == job.by_id.end()) {
    return reject(RejectReason::kUnknownPartition,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", push.partition_id, " is not owned by shard ", job.shard_index,
                      " (", job.partitions.size(), " of ", job.plan.partitions_size(),
                      " partitions in ", PlanName(job.plan), ")")));
  }
  ShardPartition& p = *found->second;
  const v1::DType dtype = PartitionDtype(p.buffers, job.wire_dtype);
  const size_t element_bytes = WireBytes(dtype);
  if (push.dtype != dtype) {
    return reject(
        RejectReason::kWrongDtype,
        absl::InvalidArgumentError(absl::StrCat(
            "partition ", p.id, " of step ", push.step, ": dtype ", v1::DType_Name(push.dtype),
            " but ", p.buffers ? "buffer partitions travel as " : "the job's wire dtype is ",
            v1::DType_Name(dtype))));
  }
  if (push.data.size != p.length * element_bytes) {
    return reject(RejectReason::kWrongLength,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", p.id, " of step ", push.step, ": expected ", p.length,
                      " elements (", p.length * element_bytes, " bytes of ", v1::DType_Name(dtype),
                      "), got ", push.data.size, " bytes")));
  }
  if (push.sample_count > kMaxSamplesPerPush) {
    return reject(RejectReason::kTooManySamples,
                  absl::InvalidArgumentError(
                      absl::StrCat("partition ", p.id, " of step ", push.step, " from node ",
                                   push.node_rank, ": sample_count ", push.sample_count,
                                   " is above the limit of ", kMaxSamplesPerPush, " per push")));
  }
  // A node whose share of a short last batch is empty still pushes (SYNC waits for
  // every node), with zero samples and a zero gradient. Buffers are values, not
  // gradients: node 0 sends them whatever its samples.
  if (!p.buffers && push.sample_count == 0 && !AllZero(job.wire_dtype, push.data)) {
    return reject(RejectReason::kZeroSamples,
                  absl::InvalidArgumentError(
                      absl::StrCat("partition ", p.id, " of step ", push.step, " from node ",
                                   push.node_rank, ": sample_count 0 with a non-zero gradient")));
  }
  // One step per push, except in LOCAL_SGD: a round of up to sync_every steps that
  // ends at the next multiple of sync_every.
  const uint32_t steps = std::max<uint32_t>(1, push.steps);
  const uint64_t round_room =
      job.mode == v1::LOCAL_SGD ? job.spec.sync_every() - push.step % job.spec.sync_every() : 1;
  if (steps > round_room) {
    return reject(RejectReason::kWrongSteps,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", p.id, " of step ", push.step, " from node ", push.node_rank,
                      ": the push covers ", push.steps, " steps; ",
                      job.mode == v1::LOCAL_SGD
                          ? absl::StrCat("a round from step ", push.step, " covers at most ",
                                         round_room, " (sync_every ", job.spec.sync_every(), ")")
                          : absl::StrCat(v1::TrainingMode_Name(job.mode),
                                         " pushes cover one step"))));
  }
  sinks_.Register(push.node_rank, sink);
  absl::MutexLock partition_lock(&p.mu);
  return job.aggregator->Push(job, p, push, sink);
}

void ParameterShard::Detach(NodeSink* sink) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (job_ != nullptr) {
      for (auto& partition : job_->partitions) {
        absl::MutexLock partition_lock(&partition->mu);
        auto& held = partition->held;
        held.erase(std::remove_if(held.begin(), held.end(),
                                  [sink](const HeldPush& h) { return h.sink == sink; }),
                   held.end());
      }
    }
  }
  sinks_.Detach(sink);
}

// ---------------------------------------------------------------------------------
// Steps

void ParameterShard::MovePartitionStep(ShardPartition& p, uint64_t from, uint64_t to) {
  const uint64_t interval = job_->spec.checkpoint_interval_steps();
  if (job_->periodic_checkpoints && to / interval > from / interval) {
    if (p.captures.size() >= ShardPartition::kMaxCaptures) {
      // Only when pushes got past the backlog wait (it gives up after a while).
      LOG(WARNING) << "partition " << p.id << ": the checkpoint of step " << p.captures.front().step
                   << " was not written in time and is dropped";
      p.captures.pop_front();
    }
    // The values are shared (never modified once published); the state is copied.
    p.captures.push_back(ShardPartition::Capture{to, PartitionData{p.values, p.state}});
  }
  uint64_t reached = 0;
  bool checkpoint = false;
  {
    absl::MutexLock lock(&steps_mu_);
    partitions_at_step_.Move(from, to);
    reached = partitions_at_step_.lowest();
    if (reached <= last_reported_step_) return;
    checkpoint = interval > 0 && reached / interval > last_reported_step_ / interval;
    last_reported_step_ = reached;
  }
  metrics_.step.Set(static_cast<double>(reached));
  if (checkpoint) checkpointer_.Request(reached);
}

void ParameterShard::ResetStepTracking() {
  // Partition locks are taken before steps_mu_, as on the push path.
  std::vector<uint64_t> steps;
  for (auto& partition : job_->partitions) {
    absl::MutexLock partition_lock(&partition->mu);
    steps.push_back(partition->step);
  }
  absl::MutexLock lock(&steps_mu_);
  partitions_at_step_.Clear();
  for (uint64_t step : steps) partitions_at_step_.Add(step);
  last_reported_step_ = partitions_at_step_.lowest();
  metrics_.step.Set(static_cast<double>(last_reported_step_));
}

uint64_t ParameterShard::ShardStepLocked() const {
  absl::MutexLock lock(&steps_mu_);
  return partitions_at_step_.lowest();
}

// ---------------------------------------------------------------------------------
// Generations

absl::StatusOr<v1::BeginGenerationResponse> ParameterShard::BeginGeneration(
    const v1::BeginGenerationRequest& request) {
  if (request.num_nodes() == 0 || request.num_nodes() > kMaxNodes) {
    return absl::InvalidArgumentError(absl::StrCat("BeginGeneration ", request.generation(),
                                                   ": num_nodes ", request.num_nodes(),
                                                   " is not in [1, ", kMaxNodes, "]"));
  }
  absl::MutexLock lock(&mu_);
  if (job_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("BeginGeneration ", request.generation(), " of job '", request.job_id(),
                     "': shard ", shard_index_,
                     " holds no job; the workers' InitPartitions installs it at their "
                     "generation"));
  }
  return BeginGenerationLocked(request);
}

absl::StatusOr<v1::BeginGenerationResponse> ParameterShard::BeginGenerationLocked(
    const v1::BeginGenerationRequest& request) {
  ShardJob& job = *job_;
  if (request.job_id() != job.job_id) {
    return absl::FailedPreconditionError(absl::StrCat("BeginGeneration for job '", request.job_id(),
                                                      "' but shard ", job.shard_index,
                                                      " holds job '", job.job_id, "'"));
  }
  const bool fence = request.fence();
  // The generation a fence began is begun for real by the same number.
  const bool after_fence = !fence && job.fenced && request.generation() == job.generation;
  if (request.generation() <= job.generation && !after_fence) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BeginGeneration: generation ", request.generation(), " is not newer than shard ",
        job.shard_index, "'s current generation ", job.generation));
  }
  uint64_t resume = request.resume_step();
  uint32_t rolled_back = 0;
  std::string unreachable;
  if (fence) resume = UINT64_MAX;
  for (auto& partition : job.partitions) {
    absl::MutexLock partition_lock(&partition->mu);
    if (fence) {
      resume = std::min(resume, partition->step);
    } else if (unreachable.empty()) {
      unreachable = job.aggregator->CannotResume(*partition, resume, job.shard_index);
    }
  }
  if (fence && job.partitions.empty()) resume = 0;
  if (!unreachable.empty()) {
    // Another shard went back to a checkpoint (it restarted): rewind to this shard's
    // own checkpoint of that step, which the same checkpoint interval wrote.
    absl::StatusOr<uint32_t> rewound = RewindToCheckpointLocked(resume);
    if (!rewound.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("BeginGeneration ", request.generation(), ": resume_step ", resume,
                       " cannot be reached: ", unreachable, ", and ", rewound.status().message()));
    }
    rolled_back = *rewound;
  }
  uint32_t discarded = 0;
  for (auto& partition : job.partitions) {
    absl::MutexLock partition_lock(&partition->mu);
    // A fence keeps each partition at its own step.
    job.aggregator->Resume(*partition, fence ? partition->step : resume, request.num_nodes(),
                           &rolled_back, &discarded);
    // Captured steps past the resume step are of a timeline that is gone.
    auto& captures = partition->captures;
    captures.erase(std::remove_if(captures.begin(), captures.end(),
                                  [&](const ShardPartition::Capture& c) {
                                    return c.step > partition->step;
                                  }),
                   captures.end());
  }
  sinks_.EndAll(absl::FailedPreconditionError(
      absl::StrCat("generation ", request.generation(), " began on shard ", job.shard_index,
                   "; this stream's generation ", job.generation, " is over")));
  sinks_.Reset(request.num_nodes());
  if (fence) {
    LOG(INFO) << "shard " << job.shard_index << ": generation " << job.generation
              << " fenced by generation " << request.generation() << " at step " << resume
              << "; discarded " << discarded << " partial aggregates";
  } else {
    LOG(INFO) << "shard " << job.shard_index << ": generation " << request.generation() << " ("
              << request.num_nodes() << " nodes) resumes job '" << job.job_id << "' at step "
              << resume << "; rolled back " << rolled_back << ", discarded " << discarded
              << " partial aggregates (was generation " << job.generation << ")";
  }
  job.generation = request.generation();
  job.fenced = fence;
  job.num_nodes = request.num_nodes();
  ResetStepTracking();
  metrics_.generation.Set(static_cast<double>(job.generation));
  v1::BeginGenerationResponse response;
  response.set_step(resume);
  response.set_rolled_back(rolled_back);
  response.set_discarded(discarded);
  return response;
}

}  // namespace tributary::ps
