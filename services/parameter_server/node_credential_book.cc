#include "services/parameter_server/node_credential_book.h"

#include "absl/strings/str_cat.h"
#include "common/issued_credentials.h"
#include "common/sha256.h"

namespace tributary::ps {

absl::Status NodeCredentialBook::Note(const v1::BeginGenerationRequest& request) {
  if (request.fence()) return absl::OkStatus();
  if (static_cast<uint64_t>(request.node_credential_sha256_size()) != request.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("BeginGeneration ", request.generation(), ": node_credential_sha256 has ",
                     request.node_credential_sha256_size(), " digests for ", request.num_nodes(),
                     " nodes (this shard checks node credentials: one digest per node rank)"));
  }
  Noted noted;
  noted.job_id = request.job_id();
  noted.digests.reserve(request.node_credential_sha256_size());
  for (const std::string& digest : request.node_credential_sha256()) {
    if (!IsSha256Hex(digest)) {
      return absl::InvalidArgumentError(
          absl::StrCat("BeginGeneration ", request.generation(), ": node_credential_sha256[",
                       noted.digests.size(), "] is not 64 lowercase hex digits"));
    }
    noted.digests.push_back(digest);
  }
  absl::MutexLock lock(&mu_);
  generations_[request.generation()] = std::move(noted);
  while (generations_.size() > kGenerationsKept) generations_.erase(generations_.begin());
  return absl::OkStatus();
}

absl::Status NodeCredentialBook::Check(absl::string_view presented, absl::string_view job_id,
                                       uint64_t generation, uint32_t node_rank,
                                       absl::string_view rpc) const {
  const std::string who =
      absl::StrCat("node ", node_rank, " of generation ", generation, " of job ", job_id);
  const std::string digest = CredentialDigest(presented);
  absl::MutexLock lock(&mu_);
  auto found = generations_.find(generation);
  if (found == generations_.end()) {
    const uint64_t newest = generations_.empty() ? 0 : generations_.rbegin()->first;
    if (generation > newest) {
      return absl::UnavailableError(absl::StrCat(
          rpc, ": ", who, ": the coordinator has not begun that generation on this shard yet",
          newest == 0 ? "" : absl::StrCat(" (newest: ", newest, ")")));
    }
    return absl::FailedPreconditionError(absl::StrCat(rpc, ": ", who, ": generation ", generation,
                                                      " is over on this shard (newest: ", newest,
                                                      ")"));
  }
  const Noted& noted = found->second;
  if (noted.job_id != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat(rpc, ": ", who, ": generation ", generation, " is of job ", noted.job_id));
  }
  if (node_rank >= noted.digests.size()) {
    return absl::PermissionDeniedError(absl::StrCat(rpc, ": ", who, ": that generation has ",
                                                    noted.digests.size(), " nodes (ranks 0..",
                                                    noted.digests.size() - 1, ")"));
  }
  if (!ConstantTimeEqual(digest, noted.digests[node_rank])) {
    return absl::PermissionDeniedError(absl::StrCat(
        rpc, ": the caller is not ", who, " (", presented.empty() ? "no" : "a wrong",
        " 'x-tributary-node' credential; the coordinator gives it with the assignment)"));
  }
  return absl::OkStatus();
}

uint32_t NodeCredentialBook::NumNodes(absl::string_view job_id, uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto found = generations_.find(generation);
  if (found == generations_.end() || found->second.job_id != job_id) return 0;
  return static_cast<uint32_t>(found->second.digests.size());
}

}  // namespace tributary::ps
