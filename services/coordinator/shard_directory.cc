#include "services/coordinator/shard_directory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tributary::coordinator {

void ShardDirectory::Restore(const v1::ShardInfo& info, absl::Time now) {
  ShardRecord record;
  record.info = info;
  record.registered = now;
  *record.summary.mutable_shard() = info;
  record.summary.set_error("registered before the coordinator restarted; not contacted yet");
  record.summary.set_checkpoint_age_seconds(-1);
  shards_[info.shard_index()] = std::move(record);
}

absl::StatusOr<ShardDirectory::Registered> ShardDirectory::Register(
    const v1::RegisterParameterServerRequest& request, absl::Time now) {
  if (request.address().empty()) {
    return absl::InvalidArgumentError(
        "address: must not be empty (host:port of the shard's ParameterServer service)");
  }
  if (request.shard_index() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index: must be >= 0, or -1 to let the coordinator pick; got ",
                     request.shard_index()));
  }
  int64_t index = request.shard_index();
  if (index >= 0) {
    if (index >= expected_) {
      return absl::InvalidArgumentError(absl::StrCat("shard_index ", index,
                                                     " is out of range: --ps_shards=", expected_,
                                                     " expects shard indices 0..", expected_ - 1));
    }
    auto holder = shards_.find(static_cast<uint32_t>(index));
    if (holder != shards_.end() && holder->second.info.address() != request.address() &&
        Live(holder->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_index ", index, " is taken by the live shard at ", holder->second.info.address()));
    }
  } else {
    for (const auto& [taken, shard] : shards_) {
      if (shard.info.address() == request.address()) index = taken;
    }
    for (uint32_t free = 0; index < 0 && free < expected_; ++free) {
      if (shards_.count(free) == 0) index = free;
    }
    for (uint32_t stale = 0; index < 0 && stale < expected_; ++stale) {
      if (!Live(shards_.at(stale))) index = stale;
    }
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("all ", expected_,
                                                     " shard indices are taken by live shards "
                                                     "(--ps_shards=",
                                                     expected_, ")"));
    }
  }
  Registered registered;
  registered.shard_index = static_cast<uint32_t>(index);
  auto previous = shards_.find(registered.shard_index);
  if (previous != shards_.end()) registered.previous_address = previous->second.info.address();
  ShardRecord record;
  record.info.set_shard_index(registered.shard_index);
  record.info.set_address(request.address());
  record.info.set_http_port(request.http_port());
  record.version = request.version();
  record.registered = now;
  *record.summary.mutable_shard() = record.info;
  record.summary.set_error("not contacted yet");
  record.summary.set_checkpoint_age_seconds(-1);
  shards_[registered.shard_index] = std::move(record);
  return registered;
}

std::vector<v1::ShardInfo> ShardDirectory::Map() const {
  std::vector<v1::ShardInfo> map;
  for (const auto& [index, shard] : shards_) {
    if (index < expected_) map.push_back(shard.info);
  }
  return map;
}

std::vector<uint32_t> ShardDirectory::Missing() const {
  std::vector<uint32_t> missing;
  for (uint32_t index = 0; index < expected_; ++index) {
    if (shards_.count(index) == 0) missing.push_back(index);
  }
  return missing;
}

std::vector<v1::ShardInfo> ShardDirectory::All() const {
  std::vector<v1::ShardInfo> all;
  for (const auto& [index, shard] : shards_) all.push_back(shard.info);
  return all;
}

bool ShardDirectory::RecordPoll(const v1::ShardInfo& info,
                                const absl::StatusOr<v1::ShardStatus>& status,
                                const std::string& action_error) {
  auto record = shards_.find(info.shard_index());
  if (record == shards_.end() || record->second.info.address() != info.address()) return false;
  v1::ShardSummary& summary = record->second.summary;
  record->second.polled = true;
  summary.set_reachable(status.ok());
  if (!status.ok()) {
    summary.set_error(std::string(status.status().message()));
    return true;
  }
  summary.set_error(action_error);
  summary.set_step(status->step());
  summary.set_bytes_in(status->bytes_in());
  summary.set_bytes_out(status->bytes_out());
  summary.set_aggregation_wait_seconds(status->aggregation_wait_seconds());
  summary.set_partitions(status->partitions_size());
  summary.set_checkpoint_age_seconds(status->checkpoint_age_seconds());
  return true;
}

std::string ShardDirectory::UnreachableNote() const {
  std::vector<std::string> notes;
  for (const auto& [index, shard] : shards_) {
    if (!shard.polled || shard.summary.reachable()) continue;
    notes.push_back(absl::StrCat("PS shard ", index, " at ", shard.info.address(),
                                 " is not answering (", shard.summary.error(), ")"));
  }
  return absl::StrJoin(notes, "; ");
}

std::vector<v1::ShardSummary> ShardDirectory::Summaries() const {
  std::vector<v1::ShardSummary> summaries;
  for (const auto& [index, shard] : shards_) summaries.push_back(shard.summary);
  return summaries;
}

}  // namespace tributary::coordinator
