#include "services/coordinator/control_token.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tributary::coordinator {

absl::StatusOr<std::string> ReadControlToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control_token_file=", path, ": cannot read the file"));
  }
  std::ostringstream content;
  content << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(content.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control_token_file=", path, ": the file is empty"));
  }
  return token;
}

absl::Status CheckBearerToken(const std::optional<std::string>& authorization,
                              const std::string& token, const std::string& rpc) {
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(rpc,
                     " needs 'authorization: Bearer <token>' metadata (the coordinator runs with "
                     "--control_token_file)"));
  }
  constexpr char kScheme[] = "Bearer ";
  if (!absl::StartsWith(*authorization, kScheme)) {
    return absl::UnauthenticatedError(
        absl::StrCat(rpc, ": the authorization metadata must read 'Bearer <token>'"));
  }
  const std::string presented = authorization->substr(sizeof(kScheme) - 1);
  // Constant time in the token's length: no early exit on the first differing byte.
  unsigned char difference = presented.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    difference |= static_cast<unsigned char>(token[i] ^ (i < presented.size() ? presented[i] : 0));
  }
  if (difference != 0) {
    return absl::UnauthenticatedError(absl::StrCat(rpc, ": the bearer token is not valid"));
  }
  return absl::OkStatus();
}

}  // namespace tributary::coordinator
