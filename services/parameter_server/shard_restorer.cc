#include "services/parameter_server/shard_restorer.h"

#include <glog/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/optimizer.h"
#include "common/partition_plan.h"

namespace tributary::ps {
namespace {

// The step is in a checkpoint's file name (checkpoint_file.cc); its meta is checked
// once read.
bool NamesStep(const std::string& path, uint64_t step) {
  return path.find(absl::StrFormat("-step-%012d", step)) != std::string::npos;
}

// Why the earlier job's checkpoint cannot be this job's start; empty when it can.
std::string Differs(const CheckpointMeta& meta, const v1::RestoreJobRequest& request,
                    const v1::JobSpec& spec) {
  const v1::JobSpec earlier = WithDefaults(meta.job());
  if (!google::protobuf::util::MessageDifferencer::Equals(earlier.model(), spec.model())) {
    return absl::StrCat("model ", earlier.model().ShortDebugString(), ", this job's ",
                        spec.model().ShortDebugString());
  }
  if (meta.plan().partition_bytes() != spec.partition_bytes()) {
    return absl::StrCat("partition_bytes ", meta.plan().partition_bytes(), ", this job's ",
                        spec.partition_bytes());
  }
  if (request.num_shards() != 0 && meta.plan().num_shards() != request.num_shards()) {
    return absl::StrCat(meta.plan().num_shards(), " PS shards, this job's ", request.num_shards());
  }
  // CUT_AUTO takes the earlier job's cut (ForResume); a cut asked for must be it.
  const v1::PartitionCut cut = StoredPartitionCut(meta.job());
  if (spec.partition_cut() != v1::CUT_AUTO && spec.partition_cut() != cut) {
    return absl::StrCat("partition_cut ", v1::PartitionCut_Name(cut), ", this job's ",
                        v1::PartitionCut_Name(spec.partition_cut()));
  }
  return std::string();
}

}  // namespace

std::vector<uint64_t> ShardRestorer::Steps(const std::string& shard_dir,
                                           const std::string& job_id, uint32_t shard_index,
                                           int max) const {
  std::vector<uint64_t> steps;
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    if (static_cast<int>(steps.size()) >= max) break;
    absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
    if (!read.ok()) {
      LOG(WARNING) << "listing the checkpoints of job '" << job_id << "': skipping "
                   << read.status();
      continue;
    }
    if (read->meta.job_id() == job_id && read->meta.shard_index() == shard_index) {
      steps.push_back(read->meta.step());
    }
  }
  return steps;
}

absl::StatusOr<LoadedCheckpoint> ShardRestorer::OfStep(const std::string& shard_dir,
                                                       const std::string& job_id,
                                                       uint32_t shard_index, uint64_t step,
                                                       const std::string* plan_fingerprint,
                                                       int partitions) const {
  for (const std::string& path : ListCheckpoints(shard_dir)) {
    if (!NamesStep(path, step)) continue;
    absl::StatusOr<ShardCheckpoint> read = ReadCheckpoint(path);
    if (!read.ok()) {
      LOG(WARNING) << "checkpoint of step " << step << ": skipping " << read.status();
      continue;
    }
    const CheckpointMeta& meta = read->meta;
    if (meta.job_id() != job_id || meta.shard_index() != shard_index || meta.step() != step ||
        (plan_fingerprint != nullptr && meta.plan().fingerprint() != *plan_fingerprint) ||
        (partitions >= 0 && meta.partitions_size() != partitions)) {
      LOG(WARNING) << "checkpoint of step " << step << ": " << path << " is of job '"
                   << meta.job_id() << "' shard " << meta.shard_index() << " step "
                   << meta.step() << ", not job '" << job_id << "' shard " << shard_index
                   << "'s; skipping";
      continue;
    }
    return LoadedCheckpoint{path, *std::move(read)};
  }
  return absl::NotFoundError(absl::StrCat("no intact checkpoint of step ", step, " of job '",
                                          job_id, "' in ", shard_dir));
}

absl::StatusOr<RestoredJob> ShardRestorer::ForResume(const v1::RestoreJobRequest& request,
                                                     const v1::JobSpec& spec,
                                                     const std::string& shard_dir,
                                                     uint32_t shard_index,
                                                     const std::string& what) const {
  absl::StatusOr<LoadedCheckpoint> chosen =
      OfStep(shard_dir, request.from_job_id(), shard_index, request.step());
  if (!chosen.ok()) {
    return absl::Status(chosen.status().code(),
                        absl::StrCat(what, ": ", chosen.status().message()));
  }
  // The earlier job's parameters, state, plan and step, as the new job: its plan must
  // be the one this job's workers will make (same model, partition_bytes and shards).
  CheckpointMeta& meta = chosen->checkpoint.meta;
  if (const std::string differs = Differs(meta, request, spec); !differs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the checkpoint ", chosen->path, " is of a job with ", differs,
                     ": resume with the earlier job's model, partition_bytes, partition_cut "
                     "and shards, or start from its parameters alone (init_from)"));
  }
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(PsOptimizerSpec(spec), 1);
  if (!optimizer.ok()) return optimizer.status();
  for (const PartitionCheckpoint& partition : meta.partitions()) {
    if (static_cast<int>(partition.state_slots()) != optimizer->state_slots()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the checkpoint ", chosen->path, " holds ", partition.state_slots(),
          " optimizer state slot(s) per parameter (",
          v1::OptimizerType_Name(PsOptimizerSpec(meta.job()).type()), "), this job's PS optimizer ",
          v1::OptimizerType_Name(PsOptimizerSpec(spec).type()), " needs ",
          optimizer->state_slots(),
          ": resume with the same optimizer, or start from the parameters alone (init_from)"));
    }
  }
  meta.set_job_id(request.job_id());
  const v1::PartitionCut cut = StoredPartitionCut(meta.job());
  *meta.mutable_job() = spec;
  meta.mutable_job()->set_partition_cut(cut);  // CUT_AUTO: the plan restored is this one's.
  meta.set_generation(0);
  meta.set_num_nodes(request.num_nodes() > 0 ? request.num_nodes() : spec.nodes_min());
  meta.set_job_ended(false);
  return JobOf(chosen->path, std::move(chosen->checkpoint));
}

absl::StatusOr<std::optional<RestoredJob>> ShardRestorer::AtStartup(
    const std::string& checkpoint_dir, int shard_index) const {
  if (shard_index < 0) {
    const std::vector<uint32_t> shards = ShardsWithCheckpoints(checkpoint_dir);
    if (shards.empty()) return std::nullopt;
    if (shards.size() > 1) {
      LOG(WARNING) << checkpoint_dir << " holds checkpoints of shards " << absl::StrJoin(shards, ",")
                   << "; pass --shard_index to restore one of them. Starting empty.";
      return std::nullopt;
    }
    shard_index = static_cast<int>(shards[0]);
  }
  const std::string shard_dir = ShardDirectory(checkpoint_dir, static_cast<uint32_t>(shard_index));
  std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(shard_dir, nullptr);
  if (!loaded.has_value()) {
    LOG(INFO) << "no intact checkpoint in " << shard_dir << "; starting empty";
    return std::nullopt;
  }
  if (loaded->checkpoint.meta.job_ended()) {
    LOG(INFO) << "newest checkpoint " << loaded->path << " is the final one of ended job '"
              << loaded->checkpoint.meta.job_id() << "'; starting empty";
    return std::nullopt;
  }
  absl::StatusOr<RestoredJob> restored = JobOf(loaded->path, std::move(loaded->checkpoint));
  if (!restored.ok()) return restored.status();
  return std::optional<RestoredJob>(*std::move(restored));
}

absl::StatusOr<RestoredJob> ShardRestorer::JobOf(const std::string& path,
                                                 ShardCheckpoint checkpoint) const {
  const CheckpointMeta& meta = checkpoint.meta;
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", what));
  };
  if (absl::Status valid = ValidatePartitionPlan(meta.plan()); !valid.ok()) {
    return corrupt(valid.message());
  }
  absl::StatusOr<Optimizer> optimizer =
      Optimizer::Create(PsOptimizerSpec(meta.job()), meta.total_steps());
  if (!optimizer.ok()) return corrupt(optimizer.status().message());
  const std::vector<uint32_t> owned = PartitionsOfShard(meta.plan(), meta.shard_index());
  if (owned.size() != static_cast<size_t>(meta.partitions_size()) || meta.num_nodes() == 0 ||
      meta.num_nodes() > kMaxNodes) {
    return corrupt(absl::StrCat("holds ", meta.partitions_size(), " partitions for ",
                                meta.num_nodes(), " nodes, the plan gives shard ",
                                meta.shard_index(), " ", owned.size()));
  }
  std::unique_ptr<Aggregator> aggregator = make_aggregator_(meta.job().mode());
  JobSource source;
  source.job_id = meta.job_id();
  source.spec = meta.job();
  source.plan = meta.plan();
  source.total_steps = meta.total_steps();
  source.shard_index = meta.shard_index();
  source.generation = meta.generation();
  source.num_nodes = meta.num_nodes();
  const int slots = optimizer->state_slots();
  for (int i = 0; i < meta.partitions_size(); ++i) {
    const PartitionCheckpoint& info = meta.partitions(i);
    const v1::Partition& spec = meta.plan().partitions(static_cast<int>(owned[i]));
    if (info.id() != spec.id() || info.length() != spec.length() ||
        static_cast<int>(info.state_slots()) != slots) {
      return corrupt(absl::StrCat("partition entry ", i, " (id ", info.id(), ", length ",
                                  info.length(), ", ", info.state_slots(),
                                  " state slots) does not match the plan and optimizer"));
    }
    JobSource::Seed& seed = source.partitions.emplace_back();
    seed.partition = spec;
    seed.values = std::const_pointer_cast<v1::PartitionValues>(checkpoint.partitions[i].values);
    seed.state = std::move(checkpoint.partitions[i].state);
    seed.step = aggregator->RestoredStep(*seed.values, info.step());
    seed.skipped_non_finite = info.skipped_non_finite();
  }
  absl::StatusOr<std::unique_ptr<ShardJob>> job =
      BuildShardJob(std::move(source), *std::move(optimizer), std::move(aggregator));
  if (!job.ok()) return corrupt(job.status().message());
  RestoredJob restored;
  restored.path = path;
  restored.meta = std::move(checkpoint.meta);
  restored.job = *std::move(job);
  return restored;
}

}  // namespace tributary::ps
