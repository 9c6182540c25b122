// The operator credential of --control_token_file: the mutating job RPCs (Submit,
// Pause, Resume, Stop) need "authorization: Bearer <token>" metadata when it is set;
// everything else stays open.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_CONTROL_TOKEN_H_
#define TRIBUTARY_SERVICES_COORDINATOR_CONTROL_TOKEN_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tributary::coordinator {

// The token is the file's content without surrounding whitespace. INVALID_ARGUMENT for
// an unreadable or empty file (naming it).
absl::StatusOr<std::string> ReadControlToken(const std::string& path);

// OK when `authorization` (the metadata value, nullopt when absent) is
// "Bearer <token>"; UNAUTHENTICATED naming `rpc` otherwise. Compares in constant time.
absl::Status CheckBearerToken(const std::optional<std::string>& authorization,
                              const std::string& token, const std::string& rpc);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_CONTROL_TOKEN_H_
