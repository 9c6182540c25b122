#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace tributary {

struct Sha256::State {
  EVP_MD_CTX* context = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->context = EVP_MD_CTX_new();
  if (state_->context == nullptr ||
      EVP_DigestInit_ex(state_->context, EVP_sha256(), nullptr) != 1) {
    std::fprintf(stderr, "OpenSSL: cannot start a SHA-256 digest\n");
    std::abort();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->context); }

void Sha256::Update(absl::string_view data) {
  EVP_DigestUpdate(state_->context, data.data(), data.size());
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(state_->context, digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.HexDigest();
}

bool IsSha256Hex(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace tributary
