// The credentials the coordinator issues to the workers it admits:
//   worker credential  one per registration (RegisterWorkerResponse.worker_credential),
//                      sent as x-tributary-worker on the worker's own calls;
//   node credential    one per (job, generation, node rank) (Assignment.node_credential),
//                      sent as x-tributary-node on every call that speaks for the node.
// Each is an HMAC-SHA256 under a key drawn from the kernel's random source when the
// coordinator starts, which never leaves its process. Unlike the role credentials,
// nothing derives them from the cluster secret: a worker that holds the secret (or a
// worker certificate) speaks only for its own registration and its own node. The
// shards learn each generation's node credentials as SHA-256 digests in
// BeginGeneration (services/parameter_server/node_credential_book.h).
#ifndef TRIBUTARY_COMMON_ISSUED_CREDENTIALS_H_
#define TRIBUTARY_COMMON_ISSUED_CREDENTIALS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tributary {

class CredentialIssuer {
 public:
  static constexpr size_t kKeyBytes = 32;

  // A key from getrandom (INTERNAL when the kernel refuses).
  static absl::StatusOr<CredentialIssuer> Random();
  // A given key (tests).
  explicit CredentialIssuer(std::string key) : key_(std::move(key)) {}

  // 64 lowercase hex digits each.
  std::string Worker(absl::string_view worker_id) const;
  std::string Node(absl::string_view job_id, uint64_t generation, uint32_t node_rank) const;

  // PERMISSION_DENIED naming `rpc` and the worker id unless `presented` is the
  // credential of `worker_id`.
  absl::Status CheckWorker(absl::string_view presented, absl::string_view worker_id,
                           absl::string_view rpc) const;

 private:
  std::string Mac(absl::string_view message) const;

  std::string key_;
};

// SHA-256 of a credential, in 64 lowercase hex digits: what the shards hold
// (BeginGenerationRequest.node_credential_sha256), so that what they keep does not
// itself let anyone speak for a node.
std::string CredentialDigest(absl::string_view credential);

// a == b, in time that depends only on the sizes.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_ISSUED_CREDENTIALS_H_
