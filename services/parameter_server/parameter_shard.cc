#include "services/parameter_server/parameter_shard.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "services/parameter_server/crc32c.h"
#include "common/wire_dtype.h"

namespace tributary::ps {

// One owned partition. Every field is guarded by mu; pushes of one partition are
// serialized by it (and in the service by running on one executor thread).
struct ParameterShard::Partition {
  Partition(const v1::Partition& spec, uint32_t num_nodes)
      : id(spec.id()),
        offset(spec.offset()),
        length(static_cast<size_t>(spec.length())),
        buffers(spec.buffers()) {
    sum.resize(length);
    ResetNodes(num_nodes);
    // Values each node's stream may still hold, plus current and previous ones.
    spares.reserve(num_nodes + 2);
  }

  // Keeps a retired values buffer for reuse (the pool never grows past its capacity,
  // so keeping one never allocates).
  void Retire(std::shared_ptr<v1::PartitionValues> values) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (values != nullptr && spares.size() < spares.capacity()) {
      spares.push_back(std::move(values));
    }
  }

  void ResetNodes(uint32_t num_nodes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    pushed.assign(num_nodes, 0);
    pushed_count = 0;
    samples = 0;
    non_finite_nodes.clear();
    has_pushed.assign(num_nodes, 0);
    last_step.assign(num_nodes, 0);
    held.clear();
  }

  absl::Mutex mu;
  const uint32_t id;
  const int64_t offset;
  const size_t length;
  // Model buffers (BatchNorm statistics): node 0's pushed values become the new
  // values as they are, in FLOAT32; no division, no optimizer (tensor.proto).
  const bool buffers;

  // Current values (FLOAT32; their step and version inside). Shared, never modified
  // once published: streams may still be sending them.
  std::shared_ptr<v1::PartitionValues> values ABSL_GUARDED_BY(mu);
  // SYNC: the values of the previous step, kept for a one-step rollback (or null).
  std::shared_ptr<v1::PartitionValues> prev_values ABSL_GUARDED_BY(mu);
  // Retired values buffers, reused for the next update once no stream holds them:
  // with one per node in flight the push path allocates nothing in steady state.
  std::vector<std::shared_ptr<v1::PartitionValues>> spares ABSL_GUARDED_BY(mu);
  std::vector<float> state ABSL_GUARDED_BY(mu);       // Optimizer state, slot by slot.
  std::vector<float> prev_state ABSL_GUARDED_BY(mu);  // SYNC: state before the last step.

  // SYNC: the step the values are for; ASYNC: the slowest node's next step.
  uint64_t step ABSL_GUARDED_BY(mu) = 0;
  // Step at which the current generation began: older steps are stale.
  uint64_t generation_start_step ABSL_GUARDED_BY(mu) = 0;

  // SYNC: how long its steps waited from the first push to the last (this partition's
  // series of tributary_ps_aggregation_wait_seconds, found on first use).
  prometheus::Histogram* aggregation_wait ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t aggregation_waits ABSL_GUARDED_BY(mu) = 0;
  double aggregation_wait_seconds ABSL_GUARDED_BY(mu) = 0;

  // SYNC aggregation of `step` (ASYNC uses `sum` as scratch for the mean gradient).
  std::vector<float> sum ABSL_GUARDED_BY(mu);
  std::vector<uint8_t> pushed ABSL_GUARDED_BY(mu);
  uint32_t pushed_count ABSL_GUARDED_BY(mu) = 0;
  uint64_t samples ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_push ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> non_finite_nodes ABSL_GUARDED_BY(mu);

  // ASYNC / BOUNDED_STALENESS: each node's last applied step on this partition.
  std::vector<uint8_t> has_pushed ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> last_step ABSL_GUARDED_BY(mu);
  std::vector<HeldPush> held ABSL_GUARDED_BY(mu);

  uint64_t skipped_non_finite ABSL_GUARDED_BY(mu) = 0;
};

struct ParameterShard::Job {
  Job(Optimizer optimizer) : optimizer(std::move(optimizer)) {}

  std::string job_id;
  v1::JobSpec spec;
  v1::PartitionPlan plan;
  uint64_t total_steps = 0;
  Optimizer optimizer;
  uint32_t shard_index = 0;
  uint64_t generation = 0;
  uint32_t num_nodes = 1;
  v1::TrainingMode mode = v1::SYNC;
  uint32_t staleness = 0;
  v1::DType wire_dtype = v1::FLOAT32;
  size_t wire_bytes = 4;
  std::vector<std::unique_ptr<Partition>> partitions;  // Ascending id.
  absl::flat_hash_map<uint32_t, Partition*> by_id;
};

namespace {

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string PlanName(const v1::PartitionPlan& plan) {
  return absl::StrCat("plan ", plan.fingerprint());
}

// Cheap elementwise mean: one division pass the compiler vectorizes.
void DivideInPlace(float* data, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) data[i] /= divisor;
}

double Seconds(absl::Duration duration) { return absl::ToDoubleSeconds(duration); }

}  // namespace

ParameterShard::ParameterShard(ShardOptions options, std::shared_ptr<prometheus::Registry> registry)
    : options_(std::move(options)),
      registry_(registry != nullptr ? std::move(registry)
                                    : std::make_shared<prometheus::Registry>()),
      metrics_(*registry_),
      shard_index_(options_.shard_index) {
  checkpoint_thread_ = std::thread([this] { CheckpointLoop(); });
}

ParameterShard::~ParameterShard() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  checkpoint_thread_.join();
}

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

// ---------------------------------------------------------------------------------
// InitPartitions

absl::Status ParameterShard::InitSession::Header(const v1::InitHeader& header) {
  if (have_header_) return absl::InvalidArgumentError("InitPartitions: a second InitHeader");
  if (!ValidJobId(header.job_id())) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: job_id '", header.job_id(),
                                                   "' must be 1-128 characters of [A-Za-z0-9._-]"));
  }
  spec_ = WithDefaults(header.job());
  if (absl::Status valid = ValidateJobSpec(spec_); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: job: ", valid.message()));
  }
  const v1::PartitionPlan& plan = header.plan();
  if (absl::Status valid = ValidatePartitionPlan(plan); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: ", valid.message()));
  }
  if (plan.partition_bytes() != spec_.partition_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitPartitions: plan.partition_bytes ", plan.partition_bytes(),
                     " differs from the job's partition_bytes ", spec_.partition_bytes()));
  }
  if (plan.partition_bytes() > shard_->options_.max_partition_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitPartitions: plan.partition_bytes ", plan.partition_bytes(),
        " exceeds this shard's --max_partition_bytes ", shard_->options_.max_partition_bytes));
  }
  if (header.shard_index() >= plan.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: shard_index ",
                                                   header.shard_index(), " but the plan has ",
                                                   plan.num_shards(), " shards"));
  }
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(spec_.optimizer(), header.total_steps());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitPartitions: job: ", optimizer.status().message()));
  }
  optimizer_.emplace(*std::move(optimizer));
  {
    absl::ReaderMutexLock lock(&shard_->mu_);
    if (shard_->shard_index_ >= 0 &&
        static_cast<uint32_t>(shard_->shard_index_) != header.shard_index()) {
      return absl::InvalidArgumentError(absl::StrCat("InitPartitions: sent to shard_index ",
                                                     header.shard_index(), " but this is shard ",
                                                     shard_->shard_index_));
    }
    if (shard_->job_ != nullptr) {
      const Job& job = *shard_->job_;
      if (job.job_id != header.job_id() || job.plan.fingerprint() != plan.fingerprint()) {
        return absl::FailedPreconditionError(
            absl::StrCat("shard ", job.shard_index, " holds job '", job.job_id, "' (",
                         PlanName(job.plan), "); InitPartitions names job '", header.job_id(),
                         "' (", PlanName(plan), "): end the other job first"));
      }
      already_installed_ = true;
    }
  }
  header_ = header;
  shard_index_ = header.shard_index();
  for (const v1::Partition& partition : plan.partitions()) {
    if (partition.shard() != shard_index_) continue;
    slot_of_[partition.id()] = owned_.size();
    owned_.push_back(partition);
  }
  values_.resize(owned_.size());
  have_header_ = true;
  return absl::OkStatus();
}

absl::Status ParameterShard::InitSession::Values(v1::PartitionValues& values) {
  if (!have_header_) {
    return absl::InvalidArgumentError("InitPartitions: values before the InitHeader");
  }
  if (already_installed_) return absl::OkStatus();  // The installed values stand.
  auto slot = slot_of_.find(values.partition_id());
  if (slot == slot_of_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: partition ",
                                                   values.partition_id(), " is not owned by shard ",
                                                   shard_index_, " in ", PlanName(header_.plan())));
  }
  const v1::Partition& partition = owned_[slot->second];
  if (values.dtype() != v1::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: partition ", partition.id(),
                                                   ": initial values must be ", "FLOAT32, got ",
                                                   v1::DType_Name(values.dtype())));
  }
  const size_t expected = static_cast<size_t>(partition.length()) * 4;
  if (values.data().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitPartitions: partition ", partition.id(), ": expected ", partition.length(),
        " floats (", expected, " bytes), got ", values.data().size(), " bytes"));
  }
  std::vector<float> check(static_cast<size_t>(partition.length()));
  if (!WidenInto(v1::FLOAT32, values.data().data(), check.size(), check.data())) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: partition ", partition.id(),
                                                   ": initial values hold NaN or Inf"));
  }
  if (values_[slot->second].has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: initial values of partition ",
                                                   partition.id(), " sent twice"));
  }
  values_[slot->second].emplace();
  values_[slot->second]->Swap(&values);
  ++received_;
  return absl::OkStatus();
}

absl::StatusOr<v1::InitPartitionsResponse> ParameterShard::InitSession::Finish() {
  if (!have_header_) return absl::InvalidArgumentError("InitPartitions: no InitHeader");
  v1::InitPartitionsResponse response;
  if (!already_installed_) {
    if (received_ != owned_.size()) {
      std::vector<uint32_t> missing;
      for (size_t i = 0; i < owned_.size(); ++i) {
        if (!values_[i].has_value()) missing.push_back(owned_[i].id());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "InitPartitions: initial values missing for partitions ", absl::StrJoin(missing, ","),
          " (got ", received_, " of ", owned_.size(), ")"));
    }
    for (size_t i = 1; i < values_.size(); ++i) {
      if (values_[i]->step() != values_[0]->step()) {
        return absl::InvalidArgumentError(
            absl::StrCat("InitPartitions: partition ", owned_[i].id(), " is at step ",
                         values_[i]->step(), " but partition ", owned_[0].id(), " at step ",
                         values_[0]->step(), ": initial values must share one step"));
      }
    }
  }
  if (absl::Status installed = shard_->InstallJob(*this, &response); !installed.ok()) {
    return installed;
  }
  return response;
}

absl::Status ParameterShard::InstallJob(InitSession& session,
                                        v1::InitPartitionsResponse* response) {
  absl::MutexLock lock(&mu_);
  if (job_ != nullptr) {
    // Installed meanwhile (another node's InitPartitions) or before: same job = no-op.
    if (job_->job_id != session.header_.job_id() ||
        job_->plan.fingerprint() != session.header_.plan().fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", job_->shard_index, " holds job '", job_->job_id, "' (", PlanName(job_->plan),
          "); InitPartitions names job '", session.header_.job_id(), "' (",
          PlanName(session.header_.plan()), "): end the other job first"));
    }
    response->set_created(false);
    response->set_generation(job_->generation);
    response->set_step(ShardStepLocked());
    absl::MutexLock checkpoint_lock(&last_checkpoint_mu_);
    response->set_restored_from(restored_from_);
    return absl::OkStatus();
  }
  if (session.already_installed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", session.header_.job_id(),
        "' was ended while its InitPartitions was in flight; send the initial values again"));
  }
  if (shard_index_ >= 0 && static_cast<uint32_t>(shard_index_) != session.shard_index_) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: sent to shard_index ",
                                                   session.shard_index_, " but this is shard ",
                                                   shard_index_));
  }

  auto job = std::make_unique<Job>(*session.optimizer_);
  job->job_id = session.header_.job_id();
  job->spec = session.spec_;
  job->plan = session.header_.plan();
  job->total_steps = session.header_.total_steps();
  job->shard_index = session.shard_index_;
  job->mode = session.spec_.mode();
  job->staleness = session.spec_.staleness();
  job->wire_dtype = session.spec_.wire_dtype();
  job->wire_bytes = WireBytes(job->wire_dtype);
  job->num_nodes = session.spec_.nodes_min();
  if (pending_generation_.has_value() && pending_generation_->job_id() == job->job_id) {
    job->generation = pending_generation_->generation();
    job->num_nodes = pending_generation_->num_nodes();
    if (!session.values_.empty() &&
        session.values_[0]->step() != pending_generation_->resume_step()) {
      LOG(WARNING) << "job " << job->job_id << ": generation " << job->generation
                   << " resumes at step " << pending_generation_->resume_step()
                   << " but the initial values are for step " << session.values_[0]->step();
    }
  }
  pending_generation_.reset();
  const int slots = job->optimizer.state_slots();
  for (size_t i = 0; i < session.owned_.size(); ++i) {
    auto partition = std::make_unique<Partition>(session.owned_[i], job->num_nodes);
    Partition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    p.values = std::make_shared<v1::PartitionValues>(std::move(*session.values_[i]));
    p.values->set_partition_id(p.id);
    p.step = p.values->step();
    p.generation_start_step = p.step;
    p.state.assign(p.length * slots, 0.0f);
    job->by_id[p.id] = partition.get();
    job->partitions.push_back(std::move(partition));
  }
  shard_index_ = static_cast<int>(job->shard_index);
  job_ = std::move(job);
  ended_job_.reset();
  {
    absl::MutexLock sinks_lock(&sinks_mu_);
    sinks_.assign(job_->num_nodes, nullptr);
  }
  ResetStepTracking();
  metrics_.generation.Set(static_cast<double>(job_->generation));
  metrics_.partitions.Set(static_cast<double>(job_->partitions.size()));
  {
    absl::MutexLock checkpoint_lock(&last_checkpoint_mu_);
    restored_from_.clear();
  }
  LOG(INFO) << "shard " << job_->shard_index << ": installed job '" << job_->job_id << "' ("
            << PlanName(job_->plan) << ", " << job_->partitions.size() << " of "
            << job_->plan.partitions_size() << " partitions, "
            << BytesOfShard(job_->plan, job_->shard_index) << " bytes, "
            << v1::TrainingMode_Name(job_->mode) << ", " << job_->num_nodes << " nodes, generation "
            << job_->generation << ")";
  response->set_created(true);
  response->set_generation(job_->generation);
  response->set_step(ShardStepLocked());
  return absl::OkStatus();
}

absl::StatusOr<v1::InitPartitionsResponse> ParameterShard::Init(
    const v1::InitHeader& header, std::vector<v1::PartitionValues> values) {
  std::unique_ptr<InitSession> session = StartInit();
  if (absl::Status status = session->Header(header); !status.ok()) return status;
  for (v1::PartitionValues& value : values) {
    if (absl::Status status = session->Values(value); !status.ok()) return status;
  }
  return session->Finish();
}

// ---------------------------------------------------------------------------------
// Push

absl::Status ParameterShard::Reject(RejectReason reason, absl::Status status) {
  metrics_.Rejected(reason).Increment();
  pushes_rejected_.fetch_add(1, std::memory_order_relaxed);
  VLOG(1) << "push rejected (" << RejectReasonName(reason) << "): " << status;
  return status;
}

absl::StatusOr<PushResult> ParameterShard::Push(const v1::GradientPush& push, NodeSink* sink) {
  absl::ReaderMutexLock lock(&mu_);
  if (job_ == nullptr) {
    return Reject(RejectReason::kNoJob, absl::FailedPreconditionError(absl::StrCat(
                                            "push for job '", push.job_id(), "': shard ",
                                            shard_index_, " holds no job (InitPartitions first)")));
  }
  const Job& job = *job_;
  if (push.job_id() != job.job_id) {
    return Reject(RejectReason::kWrongJob, absl::FailedPreconditionError(absl::StrCat(
                                               "push for job '", push.job_id(), "' but shard ",
                                               job.shard_index, " holds job '", job.job_id, "'")));
  }
  if (push.generation() < job.generation) {
    return Reject(RejectReason::kStaleGeneration,
                  absl::FailedPreconditionError(absl::StrCat(
                      "stale generation ", push.generation(), " from node ", push.node_rank(),
                      ": the current generation is ", job.generation)));
  }
  if (push.generation() > job.generation) {
    return Reject(RejectReason::kFutureGeneration,
                  absl::UnavailableError(absl::StrCat(
                      "generation ", push.generation(), " has not begun on shard ", job.shard_index,
                      " (current generation ", job.generation, "); retry")));
  }
  if (push.node_rank() >= job.num_nodes) {
    return Reject(RejectReason::kBadNodeRank,
                  absl::InvalidArgumentError(absl::StrCat("node_rank ", push.node_rank(),
                                                          " is not in generation ", job.generation,
                                                          " of ", job.num_nodes, " nodes")));
  }
  auto found = job.by_id.find(push.partition_id());
  if (found == job.by_id.end()) {
    return Reject(RejectReason::kUnknownPartition,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", push.partition_id(), " is not owned by shard ", job.shard_index,
                      " (", job.partitions.size(), " of ", job.plan.partitions_size(),
                      " partitions in ", PlanName(job.plan), ")")));
  }
  Partition& p = *found->second;
  const v1::DType dtype = PartitionDtype(p.buffers, job.wire_dtype);
  const size_t element_bytes = WireBytes(dtype);
  if (push.dtype() != dtype) {
    return Reject(RejectReason::kWrongDtype,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", p.id, " of step ", push.step(), ": dtype ",
                      v1::DType_Name(push.dtype()), " but ",
                      p.buffers ? "buffer partitions travel as " : "the job's wire dtype is ",
                      v1::DType_Name(dtype))));
  }
  if (push.data().size() != p.length * element_bytes) {
    return Reject(RejectReason::kWrongLength,
                  absl::InvalidArgumentError(absl::StrCat(
                      "partition ", p.id, " of step ", push.step(), ": expected ", p.length,
                      " elements (", p.length * element_bytes, " bytes of ",
                      v1::DType_Name(dtype), "), got ", push.data().size(), " bytes")));
  }
  // A node whose share of a short last batch is empty still pushes (SYNC waits for
  // every node), with zero samples and a zero gradient. Buffers are values, not
  // gradients: node 0 sends them whatever its samples.
  if (!p.buffers && push.sample_count() == 0 &&
      !AllZero(job.wire_dtype, push.data().data(), p.length)) {
    return Reject(RejectReason::kZeroSamples,
                  absl::InvalidArgumentError(
                      absl::StrCat("partition ", p.id, " of step ", push.step(), " from node ",
                                   push.node_rank(), ": sample_count 0 with a non-zero gradient")));
  }
  RegisterSink(push.node_rank(), sink);
  absl::MutexLock partition_lock(&p.mu);
  if (job.mode == v1::SYNC) return PushSync(job, p, push, sink);
  return PushAsync(job, p, push, sink);
}

absl::StatusOr<PushResult> ParameterShard::PushSync(const Job& job, Partition& p,
                                                    const v1::GradientPush& push, NodeSink* sink) {
  const uint64_t step = push.step();
  const uint32_t node = push.node_rank();
  if (step == p.step) {
    if (p.pushed[node]) {
      metrics_.pushes_duplicate.Increment();
      pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
      return PushResult::kDuplicate;  // Its values come with the step's completion.
    }
    const char* data = push.data().data();
    if (p.pushed_count == 0) p.first_push = absl::Now();
    bool finite = true;
    if (p.buffers) {
      // Only node 0's buffers count; the other nodes' pushes just complete the step.
      if (node == 0) finite = WidenInto(v1::FLOAT32, data, p.length, p.sum.data());
    } else if (p.pushed_count == 0) {
      finite = WidenInto(job.wire_dtype, data, p.length, p.sum.data());
    } else {
      finite = AccumulateInto(job.wire_dtype, data, p.length, p.sum.data());
    }
    if (!finite) p.non_finite_nodes.push_back(node);
    p.pushed[node] = 1;
    ++p.pushed_count;
    p.samples += push.sample_count();
    metrics_.pushes_accepted.Increment();
    metrics_.bytes_in.Increment(static_cast<double>(push.data().size()));
    pushes_accepted_.fetch_add(1, std::memory_order_relaxed);
    bytes_in_.fetch_add(push.data().size(), std::memory_order_relaxed);
    if (p.pushed_count == job.num_nodes) CompleteSyncStep(job, p);
    return PushResult::kAccepted;
  }
  if (step < p.step && step >= p.generation_start_step) {
    // Every node pushed every completed step of this generation: an exact duplicate.
    metrics_.pushes_duplicate.Increment();
    pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
    DeliverTo(sink, p.values);
    return PushResult::kDuplicate;
  }
  if (step < p.step) {
    return Reject(RejectReason::kStaleStep,
                  absl::FailedPreconditionError(absl::StrCat(
                      "stale step ", step, " for partition ", p.id, " from node ", node,
                      ": generation ", job.generation, " began at step ", p.generation_start_step,
                      " and the partition is at step ", p.step)));
  }
  return Reject(RejectReason::kStepAhead, absl::FailedPreconditionError(absl::StrCat(
                                              "step ", step, " for partition ", p.id, " from node ",
                                              node, " is ahead: the partition is at step ", p.step,
                                              " (SYNC runs one step at a time)")));
}

std::shared_ptr<v1::PartitionValues> ParameterShard::NextValues(Partition& p) {
  std::shared_ptr<v1::PartitionValues> next;
  for (auto it = p.spares.begin(); it != p.spares.end(); ++it) {
    if (it->use_count() == 1) {  // Nobody is sending it any more: reuse its buffer.
      next = std::move(*it);
      *it = std::move(p.spares.back());
      p.spares.pop_back();
      break;
    }
  }
  if (next == nullptr) {
    next = std::make_shared<v1::PartitionValues>();
    next->set_partition_id(p.id);
    next->set_dtype(v1::FLOAT32);
  }
  next->mutable_data()->assign(p.values->data());
  next->set_version(p.values->version());
  next->set_step(p.values->step());
  return next;
}

void ParameterShard::CompleteSyncStep(const Job& job, Partition& p) {
  const absl::Time now = absl::Now();
  float* grad = p.sum.data();
  if (!p.buffers) DivideInPlace(grad, p.length, static_cast<float>(p.samples));
  const bool finite = p.non_finite_nodes.empty() && AllFinite(grad, p.length);
  std::shared_ptr<v1::PartitionValues> next = NextValues(p);
  p.prev_state = p.state;  // Same size every step: copies without allocating.
  if (finite) {
    float* params = reinterpret_cast<float*>(next->mutable_data()->data());
    const absl::Time start = absl::Now();
    if (p.buffers) {
      std::memcpy(params, grad, p.length * sizeof(float));  // Node 0's buffers.
    } else {
      job.optimizer.Apply(p.step, params, grad, p.state.data(), p.length);
    }
    metrics_.optimizer_apply_seconds.Observe(Seconds(absl::Now() - start));
    next->set_version(next->version() + 1);
    metrics_.updates_applied.Increment();
    updates_applied_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ++p.skipped_non_finite;
    metrics_.updates_skipped_non_finite.Increment();
    updates_skipped_.fetch_add(1, std::memory_order_relaxed);
    LOG_EVERY_N(WARNING, 100) << "partition " << p.id << " step " << p.step
                              << ": non-finite gradient "
                              << (p.non_finite_nodes.empty()
                                      ? std::string("(the sum overflowed)")
                                      : absl::StrCat("from node(s) ",
                                                     absl::StrJoin(p.non_finite_nodes, ",")))
                              << "; update skipped, parameters unchanged (" << google::COUNTER
                              << " so far)";
  }
  next->set_step(p.step + 1);
  const absl::Duration wait = now - p.first_push;
  if (p.aggregation_wait == nullptr) p.aggregation_wait = &metrics_.AggregationWait(p.id);
  p.aggregation_wait->Observe(Seconds(wait));
  ++p.aggregation_waits;
  p.aggregation_wait_seconds += Seconds(wait);
  aggregation_wait_count_.fetch_add(1, std::memory_order_relaxed);
  aggregation_wait_micros_.fetch_add(static_cast<uint64_t>(absl::ToInt64Microseconds(wait)),
                                     std::memory_order_relaxed);

  p.Retire(std::move(p.prev_values));
  p.prev_values = std::move(p.values);
  p.values = std::move(next);
  ++p.step;
  std::fill(p.pushed.begin(), p.pushed.end(), 0);
  p.pushed_count = 0;
  p.samples = 0;
  p.non_finite_nodes.clear();
  DeliverToAll(p.values);
  MovePartitionStep(p.step - 1, p.step);
}

void ParameterShard::ApplyAsyncPush(const Job& job, Partition& p, const v1::GradientPush& push) {
  const uint64_t step = push.step();
  const uint32_t node = push.node_rank();
  const bool finite_input = WidenInto(PartitionDtype(p.buffers, job.wire_dtype),
                                      push.data().data(), p.length, p.sum.data());
  float* grad = p.sum.data();
  if (!p.buffers) DivideInPlace(grad, p.length, static_cast<float>(push.sample_count()));
  std::shared_ptr<v1::PartitionValues> next = NextValues(p);
  if (finite_input && AllFinite(grad, p.length)) {
    float* params = reinterpret_cast<float*>(next->mutable_data()->data());
    const absl::Time start = absl::Now();
    if (p.buffers) {
      std::memcpy(params, grad, p.length * sizeof(float));  // Node 0's buffers.
    } else {
      job.optimizer.Apply(p.values->version(), params, grad, p.state.data(), p.length);
    }
    metrics_.optimizer_apply_seconds.Observe(Seconds(absl::Now() - start));
    next->set_version(next->version() + 1);
    metrics_.updates_applied.Increment();
    updates_applied_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ++p.skipped_non_finite;
    metrics_.updates_skipped_non_finite.Increment();
    updates_skipped_.fetch_add(1, std::memory_order_relaxed);
    LOG_EVERY_N(WARNING, 100) << "partition " << p.id << " step " << step << " from node " << node
                              << ": non-finite gradient; update skipped (" << google::COUNTER
                              << " so far)";
  }
  next->set_step(step + 1);
  p.Retire(std::move(p.values));
  p.values = std::move(next);
}

absl::StatusOr<PushResult> ParameterShard::PushAsync(const Job& job, Partition& p,
                                                     const v1::GradientPush& push, NodeSink* sink) {
  const uint64_t step = push.step();
  const uint32_t node = push.node_rank();
  if (step < p.generation_start_step) {
    return Reject(
        RejectReason::kStaleStep,
        absl::FailedPreconditionError(absl::StrCat(
            "stale step ", step, " for partition ", p.id, " from node ", node, ": generation ",
            job.generation, " began at step ", p.generation_start_step)));
  }
  if (p.has_pushed[node]) {
    if (step == p.last_step[node]) {
      metrics_.pushes_duplicate.Increment();
      pushes_duplicate_.fetch_add(1, std::memory_order_relaxed);
      DeliverTo(sink, p.values);
      return PushResult::kDuplicate;
    }
    if (step < p.last_step[node]) {
      return Reject(RejectReason::kStaleStep,
                    absl::FailedPreconditionError(
                        absl::StrCat("stale step ", step, " for partition ", p.id, " from node ",
                                     node, ": it already pushed step ", p.last_step[node])));
    }
  }
  if (job.mode == v1::BOUNDED_STALENESS && step > p.step + job.staleness) {
    for (const HeldPush& held : p.held) {
      if (held.node == node && held.step == step && held.sink == sink) return PushResult::kHeld;
    }
    p.held.push_back(HeldPush{node, step, sink});
    metrics_.pushes_held.Increment();
    return PushResult::kHeld;
  }

  if (step >= p.step) {
    // How far ahead of the slowest node this applied push runs.
    uint64_t seen = max_staleness_applied_.load(std::memory_order_relaxed);
    while (step - p.step > seen &&
           !max_staleness_applied_.compare_exchange_weak(seen, step - p.step)) {
    }
  }
  // A node without samples this step only advances; there is nothing to apply.
  // Buffers: node 0's values are taken; the other nodes' leave them as they are.
  if (p.buffers ? node == 0 : push.sample_count() > 0) ApplyAsyncPush(job, p, push);
  metrics_.pushes_accepted.Increment();
  metrics_.bytes_in.Increment(static_cast<double>(push.data().size()));
  pushes_accepted_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(push.data().size(), std::memory_order_relaxed);

  p.has_pushed[node] = 1;
  p.last_step[node] = step;
  uint64_t slowest = UINT64_MAX;
  for (uint32_t n = 0; n < job.num_nodes; ++n) {
    slowest = std::min(slowest, p.has_pushed[n] ? p.last_step[n] + 1 : p.generation_start_step);
  }
  if (slowest != p.step) {
    const uint64_t before = p.step;
    p.step = slowest;
    MovePartitionStep(before, slowest);
    // Pushes that waited for the slowest node may go in now.
    auto admitted = [&](const HeldPush& held) { return held.step <= p.step + job.staleness; };
    for (const HeldPush& held : p.held) {
      if (admitted(held)) held.sink->Retry(p.id);
    }
    p.held.erase(std::remove_if(p.held.begin(), p.held.end(), admitted), p.held.end());
  }
  DeliverTo(sink, p.values);
  return PushResult::kAccepted;
}

// ---------------------------------------------------------------------------------
// Sinks

void ParameterShard::RegisterSink(uint32_t node, NodeSink* sink) {
  if (sink == nullptr) return;
  {
    absl::ReaderMutexLock lock(&sinks_mu_);
    if (node < sinks_.size() && sinks_[node] == sink) return;
  }
  absl::MutexLock lock(&sinks_mu_);
  if (node < sinks_.size()) sinks_[node] = sink;
}

void ParameterShard::DeliverTo(NodeSink* sink,
                               const std::shared_ptr<const v1::PartitionValues>& values) {
  if (sink == nullptr) return;
  metrics_.bytes_out.Increment(static_cast<double>(values->data().size()));
  bytes_out_.fetch_add(values->data().size(), std::memory_order_relaxed);
  sink->Deliver(values);
}

void ParameterShard::DeliverToAll(const std::shared_ptr<const v1::PartitionValues>& values) {
  absl::ReaderMutexLock lock(&sinks_mu_);
  for (NodeSink* sink : sinks_) DeliverTo(sink, values);
}

void ParameterShard::EndAllSinks(const absl::Status& status) {
  absl::MutexLock lock(&sinks_mu_);
  std::set<NodeSink*> ended;
  for (NodeSink*& sink : sinks_) {
    if (sink != nullptr && ended.insert(sink).second) sink->End(status);
    sink = nullptr;
  }
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
  absl::MutexLock lock(&sinks_mu_);
  for (NodeSink*& registered : sinks_) {
    if (registered == sink) registered = nullptr;
  }
}

// ---------------------------------------------------------------------------------
// Steps

void ParameterShard::MovePartitionStep(uint64_t from, uint64_t to) {
  uint64_t reached = 0;
  bool checkpoint = false;
  {
    absl::MutexLock lock(&steps_mu_);
    partitions_at_step_.Move(from, to);
    reached = partitions_at_step_.lowest();
    if (reached <= last_reported_step_) return;
    const uint64_t interval = job_->spec.checkpoint_interval_steps();
    checkpoint = interval > 0 && reached / interval > last_reported_step_ / interval;
    last_reported_step_ = reached;
  }
  metrics_.step.Set(static_cast<double>(reached));
  if (checkpoint) RequestPeriodicCheckpoint(reached);
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
// Control

absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> ParameterShard::Pull(
    const v1::PullRequest& request) const {
  std::string checkpoint_dir;
  uint32_t shard_index = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Job* held = job_ != nullptr ? job_.get() : ended_job_.get();
    const bool holds = (job_ != nullptr && job_->job_id == request.job_id()) ||
                       (job_ == nullptr && ended_job_ != nullptr &&
                        ended_job_->job_id == request.job_id());
    if (!holds && shard_index_ >= 0 && ValidJobId(request.job_id())) {
      // Not the job in memory: its newest checkpoint here, if any (export of a job
      // that ended before another was installed, or before this shard restarted).
      checkpoint_dir = held != nullptr && !held->spec.checkpoint_dir().empty()
                           ? held->spec.checkpoint_dir()
                           : options_.checkpoint_dir;
      shard_index = static_cast<uint32_t>(shard_index_);
    }
  }
  if (!checkpoint_dir.empty()) {
    absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>> saved =
        PullFromCheckpoint(request, checkpoint_dir, shard_index);
    if (saved.ok() || saved.status().code() != absl::StatusCode::kNotFound) return saved;
  }
  absl::ReaderMutexLock lock(&mu_);
  const Job* job = job_.get();
  if (job == nullptr && ended_job_ != nullptr && ended_job_->job_id == request.job_id()) {
    job = ended_job_.get();  // Its final parameters.
  }
  if (job == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("Pull for job '", request.job_id(),
                                                      "': shard ", shard_index_,
                                                      " holds no job (InitPartitions first)"));
  }
  if (request.job_id() != job->job_id) {
    return absl::FailedPreconditionError(absl::StrCat("Pull for job '", request.job_id(),
                                                      "' but shard ", job->shard_index,
                                                      " holds job '", job->job_id, "'"));
  }
  std::vector<Partition*> wanted;
  if (request.partition_ids().empty()) {
    for (auto& partition : job->partitions) wanted.push_back(partition.get());
  } else {
    for (uint32_t id : request.partition_ids()) {
      auto found = job->by_id.find(id);
      if (found == job->by_id.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Pull: partition ", id, " is not owned by shard ", job->shard_index));
      }
      wanted.push_back(found->second);
    }
  }
  std::vector<std::shared_ptr<const v1::PartitionValues>> values;
  values.reserve(wanted.size());
  for (Partition* partition : wanted) {
    absl::MutexLock partition_lock(&partition->mu);
    values.push_back(partition->values);
  }
  return values;
}

absl::StatusOr<std::vector<std::shared_ptr<const v1::PartitionValues>>>
ParameterShard::PullFromCheckpoint(const v1::PullRequest& request, const std::string& dir,
                                   uint32_t shard_index) const {
  const std::string shard_dir = ShardDirectory(dir, shard_index);
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    absl::StatusOr<ShardCheckpoint> checkpoint = ReadCheckpoint(path);
    if (!checkpoint.ok() || checkpoint->meta.job_id() != request.job_id()) continue;
    std::vector<std::shared_ptr<const v1::PartitionValues>> values;
    for (uint32_t id : request.partition_ids()) {
      bool found = false;
      for (const PartitionData& data : checkpoint->partitions) {
        if (data.values->partition_id() == id) {
          values.push_back(data.values);
          found = true;
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat("Pull: partition ", id,
                                                       " is not in shard ", shard_index,
                                                       "'s checkpoint ", path));
      }
    }
    if (request.partition_ids().empty()) {
      for (const PartitionData& data : checkpoint->partitions) values.push_back(data.values);
    }
    LOG(INFO) << "Pull for job '" << request.job_id() << "' served from checkpoint " << path;
    return values;
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint of job '", request.job_id(), "' in ",
                                          shard_dir));
}

absl::StatusOr<v1::BeginGenerationResponse> ParameterShard::BeginGeneration(
    const v1::BeginGenerationRequest& request) {
  if (request.num_nodes() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BeginGeneration ", request.generation(), ": num_nodes must be > 0"));
  }
  absl::MutexLock lock(&mu_);
  v1::BeginGenerationResponse response;
  response.set_step(request.resume_step());
  if (job_ == nullptr) {
    if (!ValidJobId(request.job_id())) {
      return absl::InvalidArgumentError(
          absl::StrCat("BeginGeneration: job_id '", request.job_id(), "' is not a valid job id"));
    }
    LOG(INFO) << "generation " << request.generation() << " of job '" << request.job_id() << "' ("
              << request.num_nodes() << " nodes, resume at step " << request.resume_step()
              << ") noted; it applies when the job is installed";
    pending_generation_ = request;
    return response;
  }
  Job& job = *job_;
  if (request.job_id() != job.job_id) {
    return absl::FailedPreconditionError(absl::StrCat("BeginGeneration for job '", request.job_id(),
                                                      "' but shard ", job.shard_index,
                                                      " holds job '", job.job_id, "'"));
  }
  if (request.generation() <= job.generation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BeginGeneration: generation ", request.generation(), " is not newer than shard ",
        job.shard_index, "'s current generation ", job.generation));
  }
  const uint64_t resume = request.resume_step();
  uint32_t rolled_back = 0;
  if (job.mode == v1::SYNC) {
    std::string unreachable;
    for (auto& partition : job.partitions) {
      Partition& p = *partition;
      absl::MutexLock partition_lock(&p.mu);
      const bool at = p.step == resume;
      const bool one_ahead =
          p.step == resume + 1 && p.prev_values != nullptr && p.prev_values->step() == resume;
      if (!at && !one_ahead && unreachable.empty()) {
        unreachable = absl::StrCat(
            "partition ", p.id, " of shard ", job.shard_index, " is at step ", p.step,
            p.prev_values != nullptr ? absl::StrCat(" and keeps step ", p.prev_values->step())
                                     : std::string(" and keeps no earlier step"));
      }
    }
    if (!unreachable.empty()) {
      // Another shard went back to a checkpoint (it restarted): rewind to this shard's
      // own checkpoint of that step, which the same checkpoint interval wrote.
      absl::StatusOr<uint32_t> rewound = RewindToCheckpointLocked(resume);
      if (!rewound.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "BeginGeneration ", request.generation(), ": resume_step ", resume,
            " cannot be reached: ", unreachable, ", and ", rewound.status().message()));
      }
      rolled_back = *rewound;
    }
  }
  uint32_t discarded = 0;
  for (auto& partition : job.partitions) {
    Partition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    if (job.mode == v1::SYNC) {
      if (p.pushed_count > 0) ++discarded;
      if (p.step == resume + 1) {
        p.Retire(std::move(p.values));
        p.values = std::move(p.prev_values);
        p.state.swap(p.prev_state);
        ++rolled_back;
      }
    } else {
      discarded += static_cast<uint32_t>(p.held.size());
    }
    p.step = resume;
    p.generation_start_step = resume;
    p.ResetNodes(request.num_nodes());
    p.spares.reserve(request.num_nodes() + 2);
  }
  EndAllSinks(absl::FailedPreconditionError(
      absl::StrCat("generation ", request.generation(), " began on shard ", job.shard_index,
                   "; this stream's generation ", job.generation, " is over")));
  {
    absl::MutexLock sinks_lock(&sinks_mu_);
    sinks_.assign(request.num_nodes(), nullptr);
  }
  LOG(INFO) << "shard " << job.shard_index << ": generation " << request.generation() << " ("
            << request.num_nodes() << " nodes) resumes job '" << job.job_id << "' at step "
            << resume << "; rolled back " << rolled_back << ", discarded " << discarded
            << " partial aggregates (was generation " << job.generation << ")";
  job.generation = request.generation();
  job.num_nodes = request.num_nodes();
  ResetStepTracking();
  metrics_.generation.Set(static_cast<double>(job.generation));
  response.set_rolled_back(rolled_back);
  response.set_discarded(discarded);
  return response;
}

absl::StatusOr<uint32_t> ParameterShard::RewindToCheckpointLocked(uint64_t step) {
  Job& job = *job_;
  const std::string dir = CheckpointDirLocked();
  if (dir.empty()) return absl::NotFoundError("the shard has no checkpoint directory");
  const std::string shard_dir = ShardDirectory(dir, job.shard_index);
  // The step is in the file name (checkpoint_file.cc); the meta is checked below.
  const std::string marker = absl::StrFormat("-step-%012d", step);
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    if (path.find(marker) == std::string::npos) continue;
    absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
    if (!read.ok()) {
      LOG(WARNING) << "rewind to step " << step << ": skipping " << read.status();
      continue;
    }
    const CheckpointMeta& meta = read->meta;
    if (meta.job_id() != job.job_id || meta.plan().fingerprint() != job.plan.fingerprint() ||
        meta.shard_index() != job.shard_index || meta.step() != step ||
        meta.partitions_size() != static_cast<int>(job.partitions.size())) {
      LOG(WARNING) << "rewind to step " << step << ": " << path << " is of job '" << meta.job_id()
                   << "' shard " << meta.shard_index() << " step " << meta.step()
                   << ", not this job's; skipping";
      continue;
    }
    const int slots = job.optimizer.state_slots();
    for (int i = 0; i < meta.partitions_size(); ++i) {
      Partition& p = *job.partitions[i];
      if (meta.partitions(i).id() != p.id ||
          read->partitions[i].state.size() != p.length * static_cast<size_t>(slots)) {
        return absl::DataLossError(
            absl::StrCat(path, ": partition entry ", i, " does not match partition ", p.id));
      }
    }
    for (int i = 0; i < meta.partitions_size(); ++i) {
      Partition& p = *job.partitions[i];
      absl::MutexLock partition_lock(&p.mu);
      p.Retire(std::move(p.values));
      p.values = std::const_pointer_cast<v1::PartitionValues>(read->partitions[i].values);
      p.state = std::move(read->partitions[i].state);
      p.prev_values.reset();
      p.step = step;
    }
    LOG(WARNING) << "shard " << job.shard_index << ": rewound job '" << job.job_id << "' to step "
                 << step << " from " << path << " (another shard resumed from its checkpoint)";
    return static_cast<uint32_t>(meta.partitions_size());
  }
  return absl::NotFoundError(
      absl::StrCat("no intact checkpoint of step ", step, " in ", shard_dir));
}

v1::ShardStatus ParameterShard::Status() const {
  v1::ShardStatus status;
  absl::ReaderMutexLock lock(&mu_);
  status.set_shard_index(shard_index_ < 0 ? 0 : static_cast<uint32_t>(shard_index_));
  status.set_bytes_in(bytes_in_.load());
  status.set_bytes_out(bytes_out_.load());
  status.set_pushes_accepted(pushes_accepted_.load());
  status.set_pushes_duplicate(pushes_duplicate_.load());
  status.set_pushes_rejected(pushes_rejected_.load());
  status.set_updates_applied(updates_applied_.load());
  status.set_updates_skipped_non_finite(updates_skipped_.load());
  status.set_max_staleness_applied(max_staleness_applied_.load());
  const uint64_t waits = aggregation_wait_count_.load();
  status.set_aggregation_wait_seconds(
      waits == 0 ? 0.0 : static_cast<double>(aggregation_wait_micros_.load()) / 1e6 / waits);
  {
    absl::MutexLock checkpoint_lock(&last_checkpoint_mu_);
    status.set_last_checkpoint(last_checkpoint_path_);
    status.set_last_checkpoint_step(last_checkpoint_step_);
    status.set_checkpoint_age_seconds(last_checkpoint_time_ == absl::InfinitePast()
                                          ? -1.0
                                          : Seconds(absl::Now() - last_checkpoint_time_));
  }
  const Job* shown = job_ != nullptr ? job_.get() : ended_job_.get();
  if (shown == nullptr) return status;
  const Job& job = *shown;
  status.set_job_id(job.job_id);
  status.set_job_ended(job_ == nullptr);
  status.set_generation(job.generation);
  if (job_ != nullptr) {
    status.set_step(ShardStepLocked());
  } else {
    uint64_t lowest = ~uint64_t{0};
    for (const auto& partition : job.partitions) {
      absl::MutexLock partition_lock(&partition->mu);
      lowest = std::min(lowest, partition->step);
    }
    status.set_step(job.partitions.empty() ? 0 : lowest);
  }
  status.set_mode(job.mode);
  status.set_num_nodes(job.num_nodes);
  for (const auto& partition : job.partitions) {
    Partition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    v1::PartitionStatus* out = status.add_partitions();
    out->set_partition_id(p.id);
    out->set_offset(p.offset);
    out->set_length(static_cast<int64_t>(p.length));
    out->set_version(p.values->version());
    out->set_step(p.step);
    out->set_skipped_non_finite(p.skipped_non_finite);
    if (p.aggregation_waits > 0) {
      out->set_aggregation_wait_seconds(p.aggregation_wait_seconds / p.aggregation_waits);
    }
    for (uint32_t node = 0; node < job.num_nodes; ++node) {
      // SYNC: who has not pushed this step; otherwise the slowest node(s).
      const bool waiting =
          job.mode == v1::SYNC
              ? !p.pushed[node]
              : (p.has_pushed[node] ? p.last_step[node] + 1 : p.generation_start_step) == p.step;
      if (waiting) out->add_waiting_for(node);
    }
  }
  return status;
}

// ---------------------------------------------------------------------------------
// Checkpoints

std::string ParameterShard::CheckpointDirLocked() const {
  if (job_ != nullptr && !job_->spec.checkpoint_dir().empty()) return job_->spec.checkpoint_dir();
  return options_.checkpoint_dir;
}

absl::StatusOr<ShardCheckpoint> ParameterShard::Snapshot(uint64_t step, bool job_ended) {
  const Job& job = *job_;
  ShardCheckpoint snapshot;
  CheckpointMeta& meta = snapshot.meta;
  meta.set_job_id(job.job_id);
  *meta.mutable_job() = job.spec;
  *meta.mutable_plan() = job.plan;
  meta.set_shard_index(job.shard_index);
  meta.set_total_steps(job.total_steps);
  meta.set_generation(job.generation);
  meta.set_num_nodes(job.num_nodes);
  meta.set_step(step);
  meta.set_job_ended(job_ended);
  const uint32_t slots = static_cast<uint32_t>(job.optimizer.state_slots());
  for (const auto& partition : job.partitions) {
    Partition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    PartitionData data;
    if (job.mode != v1::SYNC || p.step == step) {
      data.values = p.values;
      data.state = p.state;
    } else if (p.step == step + 1 && p.prev_values != nullptr && p.prev_values->step() == step) {
      data.values = p.prev_values;
      data.state = p.prev_state;
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot checkpoint step ", step, ": partition ", p.id, " has moved on to step ", p.step));
    }
    PartitionCheckpoint* info = meta.add_partitions();
    info->set_id(p.id);
    info->set_length(static_cast<int64_t>(p.length));
    info->set_state_slots(slots);
    info->set_version(data.values->version());
    info->set_step(job.mode == v1::SYNC ? data.values->step() : p.step);
    info->set_skipped_non_finite(p.skipped_non_finite);
    snapshot.partitions.push_back(std::move(data));
  }
  return snapshot;
}

absl::StatusOr<v1::CheckpointResponse> ParameterShard::WriteSnapshot(
    const ShardCheckpoint& const_snapshot, const std::string& dir) {
  ShardCheckpoint snapshot = const_snapshot;
  {
    // Names sort by time; never reuse or go back in time (clock steps, fast retries).
    absl::MutexLock lock(&last_checkpoint_mu_);
    last_written_micros_ = std::max(absl::ToUnixMicros(absl::Now()), last_written_micros_ + 1);
    snapshot.meta.set_written_unix_micros(last_written_micros_);
  }
  const std::string shard_dir = ShardDirectory(dir, snapshot.meta.shard_index());
  absl::StatusOr<WrittenCheckpoint> written = WriteCheckpoint(shard_dir, snapshot);
  if (!written.ok()) {
    metrics_.checkpoints_error.Increment();
    LOG(ERROR) << "checkpoint of step " << snapshot.meta.step() << " failed: " << written.status();
    return written.status();
  }
  PruneCheckpoints(shard_dir, options_.checkpoints_to_keep);
  metrics_.checkpoints_ok.Increment();
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&last_checkpoint_mu_);
    last_checkpoint_path_ = written->path;
    last_checkpoint_step_ = snapshot.meta.step();
    last_checkpoint_time_ = now;
  }
  metrics_.last_checkpoint_timestamp_seconds.Set(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  metrics_.checkpoint_age_seconds.Set(0);
  LOG(INFO) << "checkpoint of job '" << snapshot.meta.job_id() << "' step " << snapshot.meta.step()
            << " generation " << snapshot.meta.generation()
            << (snapshot.meta.job_ended() ? " (final)" : "") << " written to " << written->path
            << " (" << written->bytes << " bytes, crc32c " << Crc32cHex(written->crc32c) << ")";
  v1::CheckpointResponse response;
  response.set_path(written->path);
  response.set_step(snapshot.meta.step());
  response.set_generation(snapshot.meta.generation());
  response.set_bytes(written->bytes);
  response.set_checksum(Crc32cHex(written->crc32c));
  return response;
}

absl::StatusOr<v1::CheckpointResponse> ParameterShard::Checkpoint() {
  absl::MutexLock checkpoint_lock(&checkpoint_mu_);
  absl::StatusOr<ShardCheckpoint> snapshot;
  std::string dir;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (job_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("Checkpoint: shard ", shard_index_, " holds no job"));
    }
    dir = CheckpointDirLocked();
    if (dir.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Checkpoint: no checkpoint directory (set --checkpoint_dir or the job's "
                       "checkpoint_dir) for job '",
                       job_->job_id, "'"));
    }
    snapshot = Snapshot(ShardStepLocked(), /*job_ended=*/false);
  }
  if (!snapshot.ok()) return snapshot.status();
  return WriteSnapshot(*snapshot, dir);
}

void ParameterShard::RequestPeriodicCheckpoint(uint64_t step) {
  absl::MutexLock lock(&queue_mu_);
  checkpoint_queue_.push_back(step);
}

void ParameterShard::FlushCheckpoints() {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](ParameterShard* shard) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return shard->checkpoint_queue_.empty() && !shard->checkpoint_busy_;
      },
      this));
}

void ParameterShard::CheckpointLoop() {
  while (true) {
    uint64_t step;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](ParameterShard* shard) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return shard->stopping_ || !shard->checkpoint_queue_.empty();
          },
          this));
      if (checkpoint_queue_.empty()) return;
      step = checkpoint_queue_.front();
      checkpoint_queue_.pop_front();
      checkpoint_busy_ = true;
    }
    {
      absl::MutexLock checkpoint_lock(&checkpoint_mu_);
      absl::StatusOr<ShardCheckpoint> snapshot;
      std::string dir;
      {
        absl::ReaderMutexLock lock(&mu_);
        if (job_ != nullptr) {
          dir = CheckpointDirLocked();
          snapshot = Snapshot(step, /*job_ended=*/false);
          if (!snapshot.ok()) {
            // The nodes ran ahead while the writer was busy: take the step they are at.
            LOG(WARNING) << "periodic checkpoint: " << snapshot.status().message()
                         << "; checkpointing the current step instead";
            snapshot = Snapshot(ShardStepLocked(), /*job_ended=*/false);
          }
        }
      }
      if (!dir.empty() && snapshot.ok()) {
        (void)WriteSnapshot(*snapshot, dir);  // Logged and counted inside.
      } else if (!dir.empty()) {
        metrics_.checkpoints_error.Increment();
        LOG(ERROR) << "periodic checkpoint of step " << step << " failed: " << snapshot.status();
      }
    }
    absl::MutexLock lock(&queue_mu_);
    checkpoint_busy_ = false;
  }
}

absl::StatusOr<v1::EndJobResponse> ParameterShard::EndJob(const v1::EndJobRequest& request) {
  absl::MutexLock checkpoint_lock(&checkpoint_mu_);
  absl::StatusOr<ShardCheckpoint> snapshot;
  std::string dir;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (job_ == nullptr || job_->job_id != request.job_id()) {
      return absl::NotFoundError(
          absl::StrCat("EndJob: job '", request.job_id(), "' is not on shard ", shard_index_,
                       job_ == nullptr ? std::string(" (no job installed)")
                                       : absl::StrCat(" (it holds job '", job_->job_id, "')")));
    }
    dir = CheckpointDirLocked();
    if (!dir.empty()) snapshot = Snapshot(ShardStepLocked(), /*job_ended=*/true);
  }
  v1::EndJobResponse response;
  if (!dir.empty()) {
    if (!snapshot.ok()) return snapshot.status();
    absl::StatusOr<v1::CheckpointResponse> written = WriteSnapshot(*snapshot, dir);
    if (!written.ok()) return written.status();  // Keep the job: EndJob can be retried.
    response.set_final_checkpoint(written->path());
  }
  absl::MutexLock lock(&mu_);
  if (job_ == nullptr || job_->job_id != request.job_id()) return response;  // Raced: done.
  EndAllSinks(absl::FailedPreconditionError(
      absl::StrCat("job '", job_->job_id, "' ended on shard ", job_->shard_index)));
  LOG(INFO) << "shard " << job_->shard_index << ": job '" << job_->job_id << "' ended"
            << (response.final_checkpoint().empty()
                    ? std::string()
                    : absl::StrCat("; final checkpoint ", response.final_checkpoint()));
  ended_job_ = std::move(job_);
  pending_generation_.reset();
  {
    absl::MutexLock steps_lock(&steps_mu_);
    partitions_at_step_.Clear();
    last_reported_step_ = 0;
  }
  metrics_.partitions.Set(0);
  return response;
}

absl::StatusOr<std::string> ParameterShard::RestoreFromCheckpointDirectory() {
  if (options_.checkpoint_dir.empty()) return std::string();
  absl::MutexLock checkpoint_lock(&checkpoint_mu_);
  absl::MutexLock lock(&mu_);
  int index = shard_index_;
  if (index < 0) {
    const std::vector<uint32_t> shards = ShardsWithCheckpoints(options_.checkpoint_dir);
    if (shards.empty()) return std::string();
    if (shards.size() > 1) {
      LOG(WARNING) << options_.checkpoint_dir << " holds checkpoints of shards "
                   << absl::StrJoin(shards, ",")
                   << "; pass --shard_index to restore one of them. Starting empty.";
      return std::string();
    }
    index = static_cast<int>(shards[0]);
  }
  const std::string shard_dir = ShardDirectory(options_.checkpoint_dir, index);
  std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(shard_dir, nullptr);
  if (!loaded.has_value()) {
    LOG(INFO) << "no intact checkpoint in " << shard_dir << "; starting empty";
    return std::string();
  }
  if (loaded->checkpoint.meta.job_ended()) {
    LOG(INFO) << "newest checkpoint " << loaded->path << " is the final one of ended job '"
              << loaded->checkpoint.meta.job_id() << "'; starting empty";
    return std::string();
  }
  if (absl::Status installed = InstallCheckpoint(loaded->path, std::move(loaded->checkpoint));
      !installed.ok()) {
    return installed;
  }
  return loaded->path;
}

absl::Status ParameterShard::InstallCheckpoint(const std::string& path,
                                               ShardCheckpoint checkpoint) {
  const CheckpointMeta& meta = checkpoint.meta;
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", what));
  };
  if (absl::Status valid = ValidatePartitionPlan(meta.plan()); !valid.ok()) {
    return corrupt(std::string(valid.message()));
  }
  absl::StatusOr<Optimizer> optimizer =
      Optimizer::Create(meta.job().optimizer(), meta.total_steps());
  if (!optimizer.ok()) return corrupt(std::string(optimizer.status().message()));
  const std::vector<uint32_t> owned = PartitionsOfShard(meta.plan(), meta.shard_index());
  if (owned.size() != static_cast<size_t>(meta.partitions_size()) || meta.num_nodes() == 0) {
    return corrupt(absl::StrCat("holds ", meta.partitions_size(),
                                " partitions, the plan gives shard ", meta.shard_index(), " ",
                                owned.size()));
  }
  auto job = std::make_unique<Job>(*std::move(optimizer));
  job->job_id = meta.job_id();
  job->spec = meta.job();
  job->plan = meta.plan();
  job->total_steps = meta.total_steps();
  job->shard_index = meta.shard_index();
  job->generation = meta.generation();
  job->num_nodes = meta.num_nodes();
  job->mode = meta.job().mode();
  job->staleness = meta.job().staleness();
  job->wire_dtype = meta.job().wire_dtype();
  job->wire_bytes = WireBytes(job->wire_dtype);
  const int slots = job->optimizer.state_slots();
  for (int i = 0; i < meta.partitions_size(); ++i) {
    const PartitionCheckpoint& info = meta.partitions(i);
    const v1::Partition& spec = meta.plan().partitions(static_cast<int>(owned[i]));
    if (info.id() != spec.id() || info.length() != spec.length() ||
        static_cast<int>(info.state_slots()) != slots) {
      return corrupt(absl::StrCat("partition entry ", i, " (id ", info.id(), ", length ",
                                  info.length(), ", ", info.state_slots(),
                                  " state slots) does not match the plan and optimizer"));
    }
    auto partition = std::make_unique<Partition>(spec, job->num_nodes);
    Partition& p = *partition;
    absl::MutexLock partition_lock(&p.mu);
    auto values = std::const_pointer_cast<v1::PartitionValues>(checkpoint.partitions[i].values);
    p.values = std::move(values);
    p.state = std::move(checkpoint.partitions[i].state);
    p.step = job->mode == v1::SYNC ? p.values->step() : info.step();
    p.generation_start_step = p.step;
    p.skipped_non_finite = info.skipped_non_finite();
    job->by_id[p.id] = partition.get();
    job->partitions.push_back(std::move(partition));
  }
  shard_index_ = static_cast<int>(job->shard_index);
  job_ = std::move(job);
  ended_job_.reset();
  {
    absl::MutexLock sinks_lock(&sinks_mu_);
    sinks_.assign(job_->num_nodes, nullptr);
  }
  ResetStepTracking();
  metrics_.generation.Set(static_cast<double>(job_->generation));
  metrics_.partitions.Set(static_cast<double>(job_->partitions.size()));
  {
    absl::MutexLock checkpoint_lock(&last_checkpoint_mu_);
    restored_from_ = path;
    last_checkpoint_path_ = path;
    last_checkpoint_step_ = meta.step();
    last_checkpoint_time_ = absl::FromUnixMicros(meta.written_unix_micros());
    last_written_micros_ = meta.written_unix_micros();
  }
  LOG(INFO) << "shard " << job_->shard_index << ": restored job '" << job_->job_id << "' at step "
            << meta.step() << ", generation " << meta.generation() << " from " << path;
  return absl::OkStatus();
}

void ParameterShard::RecordPulledBytes(size_t bytes) {
  metrics_.bytes_out.Increment(static_cast<double>(bytes));
  bytes_out_.fetch_add(bytes, std::memory_order_relaxed);
}

void ParameterShard::RefreshGauges() {
  absl::MutexLock lock(&last_checkpoint_mu_);
  if (last_checkpoint_time_ != absl::InfinitePast()) {
    metrics_.checkpoint_age_seconds.Set(Seconds(absl::Now() - last_checkpoint_time_));
  }
}

}  // namespace tributary::ps
