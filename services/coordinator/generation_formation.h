// The shards' side of forming a generation, outside the coordinator's lock: a plain
// class over ShardClient that turns (job, spec, shards, nodes) into a formed
// generation (its number, resume step, the shards that install the job at it) or
// the reason none formed. The Coordinator keeps the locked plan before it
// (GenerationPlanner) and the locked commit after it.
//
// Four rounds of shard calls, in order:
//   1. status: where each shard stands (a shard holding a job this coordinator no
//      longer runs is told to end it);
//   1b. restore: a job resuming an earlier one, before its first generation, on
//      shards of which some hold nothing of it: every shard installs its checkpoint
//      of the newest step all of them hold;
//   2. fence: every shard holding the job begins the new generation where it stands,
//      so that the ended generation's late pushes cannot move it past the resume
//      step; the steps are read again after;
//   3. begin: every shard learns the generation and the resume step before any
//      worker does (a shard holding nothing yet refuses; the workers' InitPartitions
//      installs the job at this generation when the job starts from step 0).
// The generation number is reserved (and, by the coordinator, written down) after
// round 1 and before any shard hears of it.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_GENERATION_FORMATION_H_
#define TRIBUTARY_SERVICES_COORDINATOR_GENERATION_FORMATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "services/coordinator/generation_planner.h"
#include "services/coordinator/shard_client.h"

namespace tributary::coordinator {

struct FormationInput {
  std::string job_id;
  v1::JobSpec spec;
  std::vector<v1::ShardInfo> shards;  // The shard map, in index order.
  uint32_t num_nodes = 0;
  // The number the new generation gets, given the newest generation any shard has
  // seen; called once, before any shard hears of the generation.
  std::function<uint64_t(uint64_t newest_seen)> reserve_generation;
  // The node credential of (generation, node rank); unset: none (the shards check
  // nothing).
  std::function<std::string(uint64_t generation, uint32_t node_rank)> node_credential;
  // Told what happened on the way that the job's events should show (a restore).
  std::function<void(const std::string& event)> note;
};

struct FormedGeneration {
  uint64_t number = 0;
  uint64_t resume_step = 0;
  // No shard held the job: training starts (again) from its initial values.
  bool from_scratch = false;
  // Shards that get the job at this generation from the workers' InitPartitions.
  std::vector<uint32_t> installing;
  // The cut of the plan the holding shards have (CUT_EVEN or CUT_LAYERS); unset when no
  // shard holds the job. A CUT_AUTO job takes it.
  std::optional<v1::PartitionCut> held_cut;
};

class GenerationFormation {
 public:
  explicit GenerationFormation(ShardClient& shards) : shards_(shards) {}

  // The formed generation, or the reason none formed (the error's message, naming
  // the shard and the round).
  absl::StatusOr<FormedGeneration> Form(const FormationInput& input);

 private:
  // Every shard's status into `statuses` (index order). A shard holding another job
  // is told to end it and listed as holding none; with empty_stays_empty, a shard
  // listed as holding none before stays so.
  absl::Status ReadStatuses(const FormationInput& input, std::vector<v1::ShardStatus>& statuses,
                            bool empty_stays_empty);
  // Round 1b: the newest step every shard holds a checkpoint of, installed on all.
  absl::Status RestoreFromEarlierJob(const FormationInput& input);
  // Round 2 on the shards holding the job.
  absl::Status Fence(const FormationInput& input, uint64_t generation,
                     const std::vector<uint32_t>& holding);
  // Round 3: the shards that refused because they hold nothing yet (a fresh job).
  absl::StatusOr<std::vector<uint32_t>> Begin(const FormationInput& input, uint64_t generation,
                                             const ResumePoint& resume);

  ShardClient& shards_;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_GENERATION_FORMATION_H_
