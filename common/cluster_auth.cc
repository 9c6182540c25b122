#include "common/cluster_auth.h"

#include <glog/logging.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <grpc/grpc_security_constants.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/issued_credentials.h"
#include "common/server_flags.h"

namespace tributary {
const char* RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kParameterServer:
      return "parameter_server";
    case Role::kWorker:
      return "worker";
    case Role::kOperator:
      return "operator";
  }
  return "unknown";
}

absl::StatusOr<std::shared_ptr<const ClusterAuth>> ClusterAuth::FromSecret(std::string secret) {
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster secret has ", secret.size(), " bytes; it needs ", kMinSecretBytes,
                     " to ", kMaxSecretBytes, " (e.g. `head -c 32 /dev/urandom | base64`)"));
  }
  return std::shared_ptr<const ClusterAuth>(new ClusterAuth(std::move(secret), false));
}

absl::StatusOr<std::shared_ptr<const ClusterAuth>> ClusterAuth::FromFile(absl::string_view flag,
                                                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::string text;
  text.resize(kMaxSecretBytes + 2);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  const std::string secret(absl::StripAsciiWhitespace(text));
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth = FromSecret(secret);
  if (!auth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": ", auth.status().message()));
  }
  return auth;
}

std::string ClusterAuth::Mac(absl::string_view message) const {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::shared_ptr<const ClusterAuth> ClusterAuth::WithCertificateRoles() const {
  return std::shared_ptr<const ClusterAuth>(new ClusterAuth(secret_, /*certificate_roles=*/true));
}

absl::StatusOr<Role> CertificateRole(const grpc::AuthContext& peer, absl::string_view rpc) {
  if (!peer.IsPeerAuthenticated()) {
    return absl::UnauthenticatedError(absl::StrCat(
        rpc, ": no verified client certificate (--certificate_roles takes the caller's role "
             "from it: mutual TLS with --tls_cert, --tls_key and --tls_ca on every component)"));
  }
  std::optional<Role> named;
  for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : peer.FindPropertyValues(property)) {
      const absl::string_view uri(value.data(), value.size());
      if (!absl::StartsWith(uri, "spiffe://")) continue;
      const size_t path = uri.find('/', std::strlen("spiffe://"));
      if (path == absl::string_view::npos) continue;
      const absl::string_view tail = uri.substr(path);
      if (!absl::StartsWith(tail, "/tributary/")) continue;
      const absl::string_view name = tail.substr(std::strlen("/tributary/"));
      for (Role role :
           {Role::kCoordinator, Role::kParameterServer, Role::kWorker, Role::kOperator}) {
        if (name != RoleName(role)) continue;
        if (named.has_value() && *named != role) {
          return absl::UnauthenticatedError(
              absl::StrCat(rpc, ": the client certificate names two roles (", RoleName(*named),
                           " and ", RoleName(role), "); give each component one"));
        }
        named = role;
      }
    }
  }
  if (!named.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat(
        rpc, ": the client certificate names no role (a URI subject alternative name "
             "spiffe://<trust domain>/tributary/<role>, role one of coordinator, "
             "parameter_server, worker, operator)"));
  }
  return *named;
}

std::string ClusterAuth::HeaderFor(Role role) const {
  const char* name = RoleName(role);
  return absl::StrCat(name, " ", Mac(absl::StrCat("tributary-role:", name)));
}

absl::StatusOr<Role> ClusterAuth::Check(const Metadata& metadata, const grpc::AuthContext* peer,
                                        RoleSet allowed, absl::string_view rpc) const {
  const std::string header = MetadataValue(metadata, kClusterAuthMetadata);
  if (header.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(rpc, ": no cluster credential (the '", kClusterAuthMetadata,
                     "' metadata; components read it from --cluster_token_file)"));
  }
  const std::pair<std::string, std::string> parts = absl::StrSplit(header, absl::MaxSplits(' ', 1));
  for (Role role : {Role::kCoordinator, Role::kParameterServer, Role::kWorker, Role::kOperator}) {
    if (parts.first != RoleName(role)) continue;
    if (!ConstantTimeEqual(parts.second, Mac(absl::StrCat("tributary-role:", parts.first)))) {
      break;
    }
    if (certificate_roles_) {
      if (peer == nullptr) {
        return absl::UnauthenticatedError(
            absl::StrCat(rpc, ": no TLS peer to take the role from (--certificate_roles)"));
      }
      absl::StatusOr<Role> certified = CertificateRole(*peer, rpc);
      if (!certified.ok()) return certified.status();
      if (*certified != role) {
        return absl::PermissionDeniedError(absl::StrCat(
            rpc, ": the client certificate names the ", RoleName(*certified),
            " role but the cluster credential claims ", RoleName(role)));
      }
    }
    if ((allowed & static_cast<RoleSet>(role)) == 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(rpc, ": the ", RoleName(role), " role may not make this call"));
    }
    return role;
  }
  return absl::UnauthenticatedError(absl::StrCat(
      rpc, ": the cluster credential is not valid (another cluster's secret, or forged)"));
}

std::string MetadataValue(const Metadata& metadata, absl::string_view key) {
  auto found = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (found == metadata.end()) return "";
  return std::string(found->second.data(), found->second.size());
}

absl::Status Authorize(const ClusterAuth* auth, const grpc::ServerContextBase& context,
                       RoleSet allowed, absl::string_view rpc) {
  if (auth == nullptr) return absl::OkStatus();
  std::shared_ptr<const grpc::AuthContext> peer;
  if (auth->certificate_roles()) peer = context.auth_context();
  return auth->Check(context.client_metadata(), peer.get(), allowed, rpc).status();
}

absl::StatusOr<std::shared_ptr<const ClusterAuth>> ClusterAuthFromFlags() {
  static const absl::StatusOr<std::shared_ptr<const ClusterAuth>>* const loaded = [] {
    const std::string path = absl::GetFlag(FLAGS_cluster_token_file);
    if (path.empty()) {
      return new absl::StatusOr<std::shared_ptr<const ClusterAuth>>(
          std::shared_ptr<const ClusterAuth>());
    }
    return new absl::StatusOr<std::shared_ptr<const ClusterAuth>>(
        ClusterAuth::FromFile("cluster_token_file", path));
  }();
  return *loaded;
}

absl::StatusOr<std::shared_ptr<const ClusterAuth>> ServerClusterAuthFromFlags(
    absl::string_view binary) {
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth = ClusterAuthFromFlags();
  if (!auth.ok()) return auth;
  if (absl::GetFlag(FLAGS_certificate_roles)) {
    if (*auth == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          binary, ": --certificate_roles needs --cluster_token_file (the secret proves the "
                  "cluster, the certificate the role)"));
    }
    if (absl::GetFlag(FLAGS_tls_cert).empty() || absl::GetFlag(FLAGS_tls_key).empty() ||
        absl::GetFlag(FLAGS_tls_ca).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          binary, ": --certificate_roles needs mutual TLS: --tls_cert, --tls_key and --tls_ca"));
    }
    return (*auth)->WithCertificateRoles();
  }
  if (*auth != nullptr) return auth;
  if (!absl::GetFlag(FLAGS_allow_unauthenticated)) {
    return absl::FailedPreconditionError(absl::StrCat(
        binary,
        ": no --cluster_token_file. Give every component of the cluster the same secret "
        "file (e.g. `head -c 32 /dev/urandom | base64 > cluster.token`), or pass "
        "--allow_unauthenticated to serve every internal call to anyone (development on a "
        "trusted network only)"));
  }
  LOG(WARNING) << binary
               << ": --allow_unauthenticated: every internal call is served to anyone who "
                  "reaches the ports";
  return auth;
}

}  // namespace tributary
