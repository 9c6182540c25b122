// SHA-256 (OpenSSL's), for the model files that travel with a job: the coordinator
// stores an upload under its digest and workers check what they fetched against it.
#ifndef TRIBUTARY_COMMON_SHA256_H_
#define TRIBUTARY_COMMON_SHA256_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace tributary {

// Incremental digest: Update any number of times, then HexDigest once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // 64 lowercase hex digits. The object is spent afterwards.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// 64 lowercase hex digits of SHA-256(data).
std::string Sha256Hex(absl::string_view data);

// True for 64 lowercase hex digits (what Sha256Hex returns).
bool IsSha256Hex(absl::string_view text);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SHA256_H_
