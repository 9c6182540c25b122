// Random bytes from the kernel (getrandom), for secrets: data-plane tickets and the
// key of the credentials the coordinator issues.
#ifndef TRIBUTARY_COMMON_SECURE_RANDOM_H_
#define TRIBUTARY_COMMON_SECURE_RANDOM_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tributary {

// `count` random bytes; INTERNAL naming getrandom's error when the kernel refuses.
absl::StatusOr<std::string> SecureRandomBytes(size_t count);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SECURE_RANDOM_H_
