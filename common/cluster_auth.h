// The cluster credential (--cluster_token_file): who may make the internal calls.
//
// Every component of a cluster (coordinator, PS shards, workers, and the operator's
// `tributary` command) reads the same secret. A caller proves its role by sending
// "x-tributary-auth: <role> <hex HMAC-SHA256(secret, "tributary-role:" + role)>"; each
// RPC accepts a fixed set of roles (docs/security.md has the table): a caller without
// the secret is UNAUTHENTICATED, a role the RPC does not accept is PERMISSION_DENIED.
// A worker's own calls and its node's pushes are further bound by credentials that the
// coordinator issues and nobody derives from the secret (issued_credentials.h):
// "x-tributary-worker" and "x-tributary-node".
//
// What it protects against: anyone who can reach a port but does not hold the secret,
// and components calling outside their role (a stale worker of an ended generation, a
// misdirected tool). The secret alone does not separate components that hold it from
// each other: whoever holds it can derive every role. With mutual TLS and
// --certificate_roles the role comes from the caller's verified client certificate
// instead (a URI subject alternative name "spiffe://<trust domain>/tributary/<role>"),
// and the header's role must be that one: a worker's key and certificate then do not
// make their holder a coordinator or an operator.
#ifndef TRIBUTARY_COMMON_CLUSTER_AUTH_H_
#define TRIBUTARY_COMMON_CLUSTER_AUTH_H_

#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/string_ref.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tributary {

enum class Role : uint8_t {
  kCoordinator = 1,
  kParameterServer = 2,
  kWorker = 4,
  kOperator = 8,  // The `tributary` command and other tools run by the operator.
};

// A set of roles, as a bit mask of Role values.
using RoleSet = uint8_t;
constexpr RoleSet operator|(Role a, Role b) {
  return static_cast<RoleSet>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr RoleSet operator|(RoleSet a, Role b) {
  return static_cast<RoleSet>(a | static_cast<uint8_t>(b));
}
constexpr RoleSet OnlyRole(Role a) { return static_cast<RoleSet>(a); }
constexpr RoleSet kAnyRole = 0x0f;

// "coordinator", "parameter_server", "worker", "operator".
const char* RoleName(Role role);

inline constexpr char kClusterAuthMetadata[] = "x-tributary-auth";
inline constexpr char kNodeCredentialMetadata[] = "x-tributary-node";
inline constexpr char kWorkerCredentialMetadata[] = "x-tributary-worker";

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

class ClusterAuth {
 public:
  static constexpr size_t kMinSecretBytes = 16;
  static constexpr size_t kMaxSecretBytes = 4096;

  // The secret in `path` (surrounding whitespace trimmed): NOT_FOUND when it cannot be
  // read, INVALID_ARGUMENT when shorter than 16 or longer than 4096 bytes; the message
  // names `flag` and the path, never the contents.
  static absl::StatusOr<std::shared_ptr<const ClusterAuth>> FromFile(absl::string_view flag,
                                                                     const std::string& path);
  // INVALID_ARGUMENT for a secret outside 16..4096 bytes.
  static absl::StatusOr<std::shared_ptr<const ClusterAuth>> FromSecret(std::string secret);

  // The same secret, with roles taken from client certificates (--certificate_roles).
  std::shared_ptr<const ClusterAuth> WithCertificateRoles() const;
  bool certificate_roles() const { return certificate_roles_; }

  // The x-tributary-auth value `role` sends.
  std::string HeaderFor(Role role) const;

  // The caller's role: UNAUTHENTICATED when x-tributary-auth is missing, malformed or
  // not made from the secret; PERMISSION_DENIED naming the role and `rpc` when the
  // role is not in `allowed`. With certificate_roles(), `peer` (the call's TLS peer)
  // must hold a verified certificate naming exactly one role (UNAUTHENTICATED
  // otherwise), and the header's role must be it (PERMISSION_DENIED naming both).
  absl::StatusOr<Role> Check(const Metadata& metadata, const grpc::AuthContext* peer,
                             RoleSet allowed, absl::string_view rpc) const;

 private:
  ClusterAuth(std::string secret, bool certificate_roles)
      : secret_(std::move(secret)), certificate_roles_(certificate_roles) {}
  std::string Mac(absl::string_view message) const;  // Lowercase hex HMAC-SHA256.

  const std::string secret_;
  const bool certificate_roles_;
};

// The role named by `peer`'s verified certificate: its URI subject alternative names of
// the form "spiffe://<trust domain>/tributary/<role>" (role as RoleName spells it).
// UNAUTHENTICATED naming `rpc` when the peer is not authenticated by a certificate,
// names no role, or names more than one.
absl::StatusOr<Role> CertificateRole(const grpc::AuthContext& peer, absl::string_view rpc);

// The value of the first `key` entry in `metadata`, empty when absent.
std::string MetadataValue(const Metadata& metadata, absl::string_view key);

// OK when `auth` is null (the process runs without --cluster_token_file, which needs
// --allow_unauthenticated), else auth->Check(...) with the call's metadata and TLS peer.
absl::Status Authorize(const ClusterAuth* auth, const grpc::ServerContextBase& context,
                       RoleSet allowed, absl::string_view rpc);

// The credential of --cluster_token_file, read once per process (later calls return
// the first result): null when the flag is empty.
absl::StatusOr<std::shared_ptr<const ClusterAuth>> ClusterAuthFromFlags();

// For a server: ClusterAuthFromFlags() (with certificate roles under
// --certificate_roles), but FAILED_PRECONDITION naming `binary` when there is no
// --cluster_token_file and no --allow_unauthenticated (then it is null and a warning is
// logged), or when --certificate_roles lacks --cluster_token_file or mutual TLS
// (--tls_cert, --tls_key and --tls_ca).
absl::StatusOr<std::shared_ptr<const ClusterAuth>> ServerClusterAuthFromFlags(
    absl::string_view binary);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CLUSTER_AUTH_H_
