// InitPartitions: a job installed on a shard in one message exchange, at the
// generation its header names (parameter_server.proto, InitHeader).
#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "common/wire_dtype.h"
#include "services/parameter_server/parameter_shard.h"

namespace tributary::ps {
namespace {

// Partition ids a message lists at most (the rest are counted).
constexpr size_t kListedIds = 16;

// The plan must be one the job's model can have: no more elements than the model has
// parameters (a built-in model's count; a TorchScript file holds every parameter, so
// not more elements than its bytes), and no more partitions than MakePartitionPlan
// can cut (MostParameterPartitions, plus the fewest for the buffers).
// A caller cannot make the shard hold more than the model.
absl::Status PlanFitsModel(const v1::JobSpec& spec, const v1::PartitionPlan& plan) {
  if (plan.num_shards() > kMaxPsShards) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: plan.num_shards ",
                                                   plan.num_shards(), " is above ", kMaxPsShards));
  }
  const uint64_t elements = static_cast<uint64_t>(plan.total_elements());
  uint64_t limit = kMaxModelParameters;
  std::string what = absl::StrCat("the most any model may have (", kMaxModelParameters, ")");
  if (IsTorchScript(spec.model())) {
    const uint64_t file_bytes = spec.model().torchscript().size_bytes();
    if (file_bytes > 0 && file_bytes < limit) {
      limit = file_bytes;
      what = absl::StrCat("the model file's ", file_bytes, " bytes");
    }
  } else {
    limit = EstimateMemory(spec, 1).parameters;
    what = absl::StrCat("the ", limit, " parameters of model ", spec.model().name());
  }
  if (elements > limit) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: plan.total_elements ",
                                                   elements, " is more than ", what));
  }
  const uint64_t per_partition = static_cast<uint64_t>(plan.partition_bytes()) / 4;
  uint64_t trained = 0;
  uint64_t buffers = 0;
  for (const v1::Partition& partition : plan.partitions()) {
    (partition.buffers() ? buffers : trained) += static_cast<uint64_t>(partition.length());
  }
  const uint64_t most =
      MostParameterPartitions(trained, plan.partition_bytes(), plan.num_shards()) +
      (buffers + per_partition - 1) / per_partition;
  if (static_cast<uint64_t>(plan.partitions_size()) > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitPartitions: plan has ", plan.partitions_size(), " partitions; ", elements,
        " elements in partitions of ", plan.partition_bytes(), " bytes over ", plan.num_shards(),
        " shards need at most ", most));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParameterShard::InitSession::Header(const v1::InitHeader& header) {
  if (have_header_) return absl::InvalidArgumentError("InitPartitions: a second InitHeader");
  if (!IsJobId(header.job_id())) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: job_id '", header.job_id(),
                                                   "' must be 1-128 characters of [A-Za-z0-9._-]"));
  }
  spec_ = WithDefaults(header.job());
  if (absl::Status valid = ValidateJobSpec(spec_); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: job: ", valid.message()));
  }
  if (spec_.partition_cut() == v1::CUT_AUTO) {
    // The shard stores and reports the cut its plan was made with (ShardStatus,
    // checkpoints); a worker's assignment always names one.
    return absl::InvalidArgumentError(
        "InitPartitions: job.partition_cut: CUT_AUTO names no plan; the coordinator "
        "resolves it to CUT_EVEN or CUT_LAYERS before any worker plans");
  }
  if (absl::StatusOr<std::string> dir = shard_->JobCheckpointDir(spec_); !dir.ok()) {
    return absl::Status(dir.status().code(),
                        absl::StrCat("InitPartitions: job: ", dir.status().message()));
  }
  const v1::PartitionPlan& plan = header.plan();
  if (absl::Status valid = ValidatePartitionPlan(plan); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: ", valid.message()));
  }
  if (absl::Status fits = PlanFitsModel(spec_, plan); !fits.ok()) return fits;
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
  if (header.num_nodes() > kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitPartitions: num_nodes ", header.num_nodes(), " is above ", kMaxNodes));
  }
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(PsOptimizerSpec(spec_), header.total_steps());
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
      const ShardJob& job = *shard_->job_;
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
  if (values.step() > kMaxJobSteps) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: partition ", partition.id(),
                                                   ": step ", values.step(), " is above ",
                                                   kMaxJobSteps));
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
  buffered_bytes_ += expected;
  shard_->metrics_.init_buffered_bytes.Increment(static_cast<double>(expected));
  return absl::OkStatus();
}

void ParameterShard::InitSession::ReleaseBuffered() {
  if (buffered_bytes_ == 0) return;
  shard_->metrics_.init_buffered_bytes.Decrement(static_cast<double>(buffered_bytes_));
  buffered_bytes_ = 0;
}

ParameterShard::InitSession::~InitSession() { ReleaseBuffered(); }

absl::StatusOr<v1::InitPartitionsResponse> ParameterShard::InitSession::Finish() {
  if (!have_header_) return absl::InvalidArgumentError("InitPartitions: no InitHeader");
  v1::InitPartitionsResponse response;
  if (!already_installed_) {
    if (received_ != owned_.size()) {
      std::vector<uint32_t> missing;
      for (size_t i = 0; i < owned_.size() && missing.size() < kListedIds; ++i) {
        if (!values_[i].has_value()) missing.push_back(owned_[i].id());
      }
      const size_t unlisted = owned_.size() - received_ - missing.size();
      return absl::InvalidArgumentError(absl::StrCat(
          "InitPartitions: initial values missing for partitions ", absl::StrJoin(missing, ","),
          unlisted == 0 ? "" : absl::StrCat(" and ", unlisted, " more"), " (got ", received_,
          " of ", owned_.size(), ")"));
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
  const v1::InitHeader& header = session.header_;
  const bool names_generation = header.num_nodes() > 0;
  if (job_ != nullptr) {
    // Installed meanwhile (another node's InitPartitions) or before: same job = no-op.
    if (job_->job_id != header.job_id() ||
        job_->plan.fingerprint() != header.plan().fingerprint()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", job_->shard_index, " holds job '", job_->job_id, "' (",
                       PlanName(job_->plan), "); InitPartitions names job '", header.job_id(),
                       "' (", PlanName(header.plan()), "): end the other job first"));
    }
    if (names_generation && header.generation() > job_->generation) {
      // Installed by a node of an older generation: move to the caller's.
      v1::BeginGenerationRequest request;
      request.set_job_id(header.job_id());
      request.set_generation(header.generation());
      request.set_num_nodes(header.num_nodes());
      request.set_resume_step(header.resume_step());
      absl::StatusOr<v1::BeginGenerationResponse> begun = BeginGenerationLocked(request);
      if (!begun.ok()) {
        return absl::Status(begun.status().code(),
                            absl::StrCat("InitPartitions: ", begun.status().message()));
      }
    }
    // A job installed from a checkpoint (restored, or resuming another job) runs to the
    // steps its workers count now: the schedule (COSINE) follows them.
    if (header.total_steps() > 0 && header.total_steps() != job_->total_steps) {
      absl::StatusOr<Optimizer> optimizer =
          Optimizer::Create(PsOptimizerSpec(job_->spec), header.total_steps());
      if (optimizer.ok()) {
        LOG(INFO) << "job '" << job_->job_id << "': " << header.total_steps()
                  << " steps in all (was " << job_->total_steps << ")";
        job_->optimizer = *std::move(optimizer);
        job_->total_steps = header.total_steps();
      }
    }
    response->set_created(false);
    response->set_generation(job_->generation);
    response->set_step(ShardStepLocked());
    response->set_restored_from(checkpointer_.restored_from());
    return absl::OkStatus();
  }
  if (session.already_installed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", header.job_id(),
        "' was ended while its InitPartitions was in flight; send the initial values again"));
  }
  if (shard_index_ >= 0 && static_cast<uint32_t>(shard_index_) != session.shard_index_) {
    return absl::InvalidArgumentError(absl::StrCat("InitPartitions: sent to shard_index ",
                                                   session.shard_index_, " but this is shard ",
                                                   shard_index_));
  }
  JobSource source;
  source.job_id = header.job_id();
  source.spec = session.spec_;
  source.plan = header.plan();
  source.total_steps = header.total_steps();
  source.shard_index = session.shard_index_;
  source.generation = names_generation ? header.generation() : 0;
  source.num_nodes = names_generation ? header.num_nodes() : session.spec_.nodes_min();
  for (size_t i = 0; i < session.owned_.size(); ++i) {
    JobSource::Seed& seed = source.partitions.emplace_back();
    seed.partition = session.owned_[i];
    seed.values = std::make_shared<v1::PartitionValues>(std::move(*session.values_[i]));
    seed.step = seed.values->step();
  }
  if (names_generation && !source.partitions.empty() &&
      source.partitions[0].step != header.resume_step()) {
    LOG(WARNING) << "job " << source.job_id << ": generation " << source.generation
                 << " resumes at step " << header.resume_step()
                 << " but the initial values are for step " << source.partitions[0].step;
  }
  session.ReleaseBuffered();  // The values now belong to the job (or are dropped).
  absl::StatusOr<std::unique_ptr<ShardJob>> job = BuildShardJob(
      std::move(source), *session.optimizer_, MakeAggregator(session.spec_.mode(), Context()));
  if (!job.ok()) return job.status();
  InstallLocked(*std::move(job));
  checkpointer_.FreshJob();
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

}  // namespace tributary::ps
