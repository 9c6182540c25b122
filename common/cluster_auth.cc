#include "common/cluster_auth.h"

#include <glog/logging.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/server_flags.h"

namespace tributary {
namespace {

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

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
  return std::shared_ptr<const ClusterAuth>(new ClusterAuth(std::move(secret)));
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

std::string ClusterAuth::HeaderFor(Role role) const {
  const char* name = RoleName(role);
  return absl::StrCat(name, " ", Mac(absl::StrCat("tributary-role:", name)));
}

absl::StatusOr<Role> ClusterAuth::Check(const Metadata& metadata, RoleSet allowed,
                                        absl::string_view rpc) const {
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
    if ((allowed & static_cast<RoleSet>(role)) == 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(rpc, ": the ", RoleName(role), " role may not make this call"));
    }
    return role;
  }
  return absl::UnauthenticatedError(absl::StrCat(
      rpc, ": the cluster credential is not valid (another cluster's secret, or forged)"));
}

std::string ClusterAuth::WorkerCredential(absl::string_view worker_id) const {
  return Mac(absl::StrCat("tributary-worker:", worker_id));
}

absl::Status ClusterAuth::CheckWorker(const Metadata& metadata, absl::string_view worker_id,
                                      absl::string_view rpc) const {
  const std::string presented = MetadataValue(metadata, kWorkerCredentialMetadata);
  if (ConstantTimeEqual(presented, WorkerCredential(worker_id))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, ": the caller is not worker '", worker_id, "' (", presented.empty() ? "no" : "a wrong",
      " '", kWorkerCredentialMetadata, "' credential; RegisterWorker gives it)"));
}

std::string ClusterAuth::NodeCredential(absl::string_view job_id, uint64_t generation,
                                        uint32_t node_rank) const {
  return Mac(absl::StrCat("tributary-node:", job_id, "/", generation, "/", node_rank));
}

absl::Status ClusterAuth::CheckNodeCredential(absl::string_view presented, absl::string_view job_id,
                                              uint64_t generation, uint32_t node_rank,
                                              absl::string_view rpc) const {
  if (ConstantTimeEqual(presented, NodeCredential(job_id, generation, node_rank))) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, ": the caller is not node ", node_rank, " of generation ", generation, " of job ",
      job_id, " (", presented.empty() ? "no" : "a wrong", " '", kNodeCredentialMetadata,
      "' credential; the coordinator gives it with the assignment)"));
}

absl::Status ClusterAuth::CheckNode(const Metadata& metadata, absl::string_view job_id,
                                    uint64_t generation, uint32_t node_rank,
                                    absl::string_view rpc) const {
  return CheckNodeCredential(MetadataValue(metadata, kNodeCredentialMetadata), job_id, generation,
                             node_rank, rpc);
}

std::string MetadataValue(const Metadata& metadata, absl::string_view key) {
  auto found = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (found == metadata.end()) return "";
  return std::string(found->second.data(), found->second.size());
}

absl::Status Authorize(const ClusterAuth* auth, const Metadata& metadata, RoleSet allowed,
                       absl::string_view rpc) {
  if (auth == nullptr) return absl::OkStatus();
  return auth->Check(metadata, allowed, rpc).status();
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
  if (!auth.ok() || *auth != nullptr) return auth;
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
