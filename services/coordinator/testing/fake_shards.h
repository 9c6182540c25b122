// In-memory PS shards behind the coordinator's ShardClient interface, for the tests of
// the coordinator and of GenerationFormation.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_SHARDS_H_
#define TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_SHARDS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/coordinator/shard_client.h"

namespace tributary::coordinator {

// In-memory PS shards, by address. Behaves like the real shard: BeginGeneration before
// the job is installed is refused (and recorded: the shard was told), the workers'
// InitPartitions installs the job at their generation, a generation must be newer than
// the current one.
class FakeShards : public ShardClient {
 public:
  struct Shard {
    bool reachable = true;
    std::string job_id;
    uint64_t generation = 0;
    uint64_t step = 0;
    uint64_t bytes_in = 0;
    // The members of an ended generation still pushing: this shard completes this
    // many steps whenever any shard is called, until a BeginGeneration (a fence
    // too) ends that generation on it.
    uint64_t racing_steps = 0;
    bool fenced = false;  // The current generation was begun by a fence.
    std::vector<v1::BeginGenerationRequest> begun;
    std::vector<std::string> ended;
    // Checkpoint steps of earlier jobs on this shard (RestoreJob), and what was restored.
    std::map<std::string, std::vector<uint64_t>> checkpoints;
    std::vector<v1::RestoreJobRequest> restored;
    int failing_restores = 0;  // The next this many installs fail (UNAVAILABLE).
    // The cut of the plan of the job it holds and of its checkpoints (ShardStatus shows
    // it while a job is held; unset: a shard that does not say).
    v1::PartitionCut cut = v1::PARTITION_CUT_UNSPECIFIED;
  };

  Shard& operator[](const std::string& address) {
    absl::MutexLock lock(&mu_);
    return shards_[address];
  }

  // What a worker's InitPartitions does to a shard: installs the job at the
  // worker's generation.
  void Install(const std::string& address, const std::string& job_id, uint64_t generation = 0) {
    absl::MutexLock lock(&mu_);
    Shard& shard = shards_[address];
    shard.job_id = job_id;
    shard.generation = generation;
  }

  absl::StatusOr<v1::ShardStatus> GetShardStatus(const v1::ShardInfo& info) override {
    absl::MutexLock lock(&mu_);
    Shard& shard = shards_[info.address()];
    if (!shard.reachable) {
      return absl::UnavailableError(absl::StrCat("PS shard ", info.shard_index(), " at ",
                                                 info.address(), ": connection refused"));
    }
    Race();
    v1::ShardStatus status;
    status.set_shard_index(info.shard_index());
    status.set_job_id(shard.job_id);
    status.set_generation(shard.generation);
    status.set_step(shard.step);
    if (!shard.job_id.empty()) status.set_partition_cut(shard.cut);
    status.set_bytes_in(shard.bytes_in);
    status.set_bytes_out(2 * shard.bytes_in);
    status.set_aggregation_wait_seconds(0.25);
    status.add_partitions()->set_partition_id(0);
    return status;
  }

  absl::StatusOr<v1::BeginGenerationResponse> BeginGeneration(
      const v1::ShardInfo& info, const v1::BeginGenerationRequest& request) override {
    absl::MutexLock lock(&mu_);
    Race();
    Shard& shard = shards_[info.address()];
    if (!shard.reachable) return absl::UnavailableError("connection refused");
    if (shard.job_id.empty()) {
      shard.begun.push_back(request);
      return absl::FailedPreconditionError("holds no job");
    }
    if (request.job_id() != shard.job_id) return absl::FailedPreconditionError("other job");
    const bool after_fence =
        !request.fence() && shard.fenced && request.generation() == shard.generation;
    if (request.generation() <= shard.generation && !after_fence) {
      return absl::FailedPreconditionError(
          absl::StrCat("generation ", request.generation(), " not newer than ", shard.generation));
    }
    shard.fenced = request.fence();
    shard.generation = request.generation();
    if (!request.fence()) {
      if (shard.step > request.resume_step() + 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "at step ", shard.step, ", cannot roll back to ", request.resume_step()));
      }
      shard.step = request.resume_step();
    }
    shard.racing_steps = 0;  // The old generation's pushes are refused from now on.
    shard.begun.push_back(request);
    return v1::BeginGenerationResponse();
  }

  absl::Status EndJob(const v1::ShardInfo& info, const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    Shard& shard = shards_[info.address()];
    if (!shard.reachable) return absl::UnavailableError("connection refused");
    if (shard.job_id != job_id) return absl::NotFoundError("not that job");
    shard.ended.push_back(job_id);
    shard.job_id.clear();
    shard.generation = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<v1::RestoreJobResponse> RestoreJob(
      const v1::ShardInfo& info, const v1::RestoreJobRequest& request) override {
    absl::MutexLock lock(&mu_);
    Shard& shard = shards_[info.address()];
    if (!shard.reachable) return absl::UnavailableError("connection refused");
    const std::vector<uint64_t>& steps = shard.checkpoints[request.from_job_id()];
    v1::RestoreJobResponse response;
    if (shard.job_id == request.job_id() && (request.list_only() || shard.step == request.step())) {
      if (request.list_only()) response.add_steps(shard.step);  // As the real shard does.
      response.set_step(shard.step);
      return response;
    }
    if (request.list_only()) {
      for (auto it = steps.rbegin(); it != steps.rend(); ++it) response.add_steps(*it);
      return response;
    }
    if (!shard.job_id.empty()) return absl::FailedPreconditionError("holds a job");
    if (shard.failing_restores > 0) {
      --shard.failing_restores;
      return absl::UnavailableError("RestoreJob on PS shard: deadline exceeded");
    }
    if (std::find(steps.begin(), steps.end(), request.step()) == steps.end()) {
      return absl::NotFoundError(absl::StrCat("no checkpoint of step ", request.step()));
    }
    shard.job_id = request.job_id();
    shard.step = request.step();
    shard.generation = 0;
    shard.restored.push_back(request);
    response.set_step(request.step());
    return response;
  }

 private:
  void Race() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [address, shard] : shards_) shard.step += shard.racing_steps;
  }

  absl::Mutex mu_;
  std::map<std::string, Shard> shards_;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_SHARDS_H_
