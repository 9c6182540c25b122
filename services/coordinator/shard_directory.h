// The PS shards the coordinator knows: which index each serves at which address, and
// what each said when last polled (for the dashboard and the job's result). Decides
// which index a registering shard gets. Not thread-safe: Coordinator holds its lock
// around every call.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_SHARD_DIRECTORY_H_
#define TRIBUTARY_SERVICES_COORDINATOR_SHARD_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/parameter_server.pb.h"

namespace tributary::coordinator {

class ShardDirectory {
 public:
  // `expected`: --ps_shards, the shards a job needs.
  explicit ShardDirectory(uint32_t expected) : expected_(expected) {}
  uint32_t expected() const { return expected_; }

  // A shard from the state file, not contacted since the restart.
  void Restore(const v1::ShardInfo& info, absl::Time now);

  struct Registered {
    uint32_t shard_index = 0;
    std::string previous_address;  // Empty: the index was free.
  };
  // Gives the shard at request.address an index: the one it asks for (free, its own,
  // or held by a shard that the last poll found unreachable), or with shard_index -1
  // the one it had, a free one, or one of an unreachable shard. INVALID_ARGUMENT
  // naming the problem otherwise; nothing changes then.
  absl::StatusOr<Registered> Register(const v1::RegisterParameterServerRequest& request,
                                      absl::Time now);

  // Shards 0..expected-1 that are registered, by index.
  std::vector<v1::ShardInfo> Map() const;
  // Indices 0..expected-1 nobody registered.
  std::vector<uint32_t> Missing() const;
  // Every registered shard, by index.
  std::vector<v1::ShardInfo> All() const;
  // Stores the result of polling the shard `info` names, unless another shard took the
  // index meanwhile (then false). `action_error`: what went wrong acting on the status.
  bool RecordPoll(const v1::ShardInfo& info, const absl::StatusOr<v1::ShardStatus>& status,
                  const std::string& action_error);
  std::vector<v1::ShardSummary> Summaries() const;
  // "PS shard 1 at HOST:PORT is not answering (ERROR)" for each shard the last poll
  // could not reach, joined with "; "; empty when every polled shard answered.
  std::string UnreachableNote() const;

 private:
  struct ShardRecord {
    v1::ShardInfo info;
    std::string version;
    absl::Time registered;
    v1::ShardSummary summary;
    bool polled = false;
  };
  static bool Live(const ShardRecord& shard) { return !shard.polled || shard.summary.reachable(); }

  const uint32_t expected_;
  std::map<uint32_t, ShardRecord> shards_;
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_SHARD_DIRECTORY_H_
