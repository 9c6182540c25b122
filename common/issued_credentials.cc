#include "common/issued_credentials.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/secure_random.h"
#include "common/sha256.h"

namespace tributary {

absl::StatusOr<CredentialIssuer> CredentialIssuer::Random() {
  absl::StatusOr<std::string> key = SecureRandomBytes(kKeyBytes);
  if (!key.ok()) {
    return absl::InternalError(absl::StrCat("no key for the credentials the coordinator issues: ",
                                            key.status().message()));
  }
  return CredentialIssuer(*std::move(key));
}

std::string CredentialIssuer::Mac(absl::string_view message) const {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string CredentialIssuer::Worker(absl::string_view worker_id) const {
  return Mac(absl::StrCat("tributary-worker:", worker_id));
}

std::string CredentialIssuer::Node(absl::string_view job_id, uint64_t generation,
                                   uint32_t node_rank) const {
  return Mac(absl::StrCat("tributary-node:", job_id, "/", generation, "/", node_rank));
}

absl::Status CredentialIssuer::CheckWorker(absl::string_view presented, absl::string_view worker_id,
                                           absl::string_view rpc) const {
  if (ConstantTimeEqual(presented, Worker(worker_id))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, ": the caller is not worker '", worker_id, "' (", presented.empty() ? "no" : "a wrong",
      " 'x-tributary-worker' credential; RegisterWorker gives it)"));
}

std::string CredentialDigest(absl::string_view credential) { return Sha256Hex(credential); }

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tributary
