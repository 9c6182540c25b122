// Random lowercase hex digits, for ids that must not repeat across restarts (worker
// id suffixes, job ids). Not for secrets.
#ifndef TRIBUTARY_COMMON_RANDOM_HEX_H_
#define TRIBUTARY_COMMON_RANDOM_HEX_H_

#include <string>

#include "absl/random/random.h"

namespace tributary {

inline std::string RandomHex(int digits) {
  absl::BitGen random;
  std::string hex;
  for (int i = 0; i < digits; ++i) hex.push_back("0123456789abcdef"[absl::Uniform(random, 0, 16)]);
  return hex;
}

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_RANDOM_HEX_H_
