// Which caller may speak for which node: the node credentials of the generations the
// coordinator began on this shard, as the SHA-256 digests BeginGeneration carries
// (BeginGenerationRequest.node_credential_sha256). A shard serving with cluster
// credentials admits InitPartitions, PushPull and OpenDataPlane of a node only with the
// credential whose digest it holds for that node of that generation: the credentials
// are issued by the coordinator and nobody derives them from the cluster secret
// (common/issued_credentials.h), so a worker speaks only for its own node.
// Thread-safe.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_NODE_CREDENTIAL_BOOK_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_NODE_CREDENTIAL_BOOK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.pb.h"

namespace tributary::ps {

class NodeCredentialBook {
 public:
  // Generations kept: the newest few, so that a node of the one just ended is told
  // its generation is over rather than that it is nobody.
  static constexpr size_t kGenerationsKept = 4;

  // Notes the node credentials of `request`'s generation (not of a fence, which no
  // node pushes in). INVALID_ARGUMENT, naming the field and the count, unless it
  // carries one digest (64 lowercase hex digits) per node.
  absl::Status Note(const v1::BeginGenerationRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  // OK when `presented` is the credential of node `node_rank` of (job, generation).
  //   PERMISSION_DENIED  another credential, or none; a node rank outside the
  //                      generation (naming its node count);
  //   UNAVAILABLE        a generation newer than any the coordinator began here (it
  //                      has not reached this shard yet);
  //   FAILED_PRECONDITION a generation that is over (an older one), or of another job.
  // Every message starts with `rpc` and names the node, generation and job.
  absl::Status Check(absl::string_view presented, absl::string_view job_id, uint64_t generation,
                     uint32_t node_rank, absl::string_view rpc) const ABSL_LOCKS_EXCLUDED(mu_);

  // The node count of (job, generation), 0 when not noted.
  uint32_t NumNodes(absl::string_view job_id, uint64_t generation) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Noted {
    std::string job_id;
    std::vector<std::string> digests;  // By node rank.
  };

  mutable absl::Mutex mu_;
  std::map<uint64_t, Noted> generations_ ABSL_GUARDED_BY(mu_);  // By generation.
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_NODE_CREDENTIAL_BOOK_H_
