#include "common/tls.h"

#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/server_flags.h"

namespace tributary {

TlsFiles TlsFilesFromFlags() {
  return TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                  absl::GetFlag(FLAGS_tls_ca)};
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("error reading ", path));
  return contents.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs both --tls_cert and --tls_key (got cert '", files.cert, "', key '",
        files.key, "')"));
  }
  absl::StatusOr<std::string> cert = ReadFileToString(files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFileToString(files.key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFileToString(files.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFileToString(files.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!files.cert.empty() && !files.key.empty()) {
    absl::StatusOr<std::string> cert = ReadFileToString(files.cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFileToString(files.key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

}  // namespace tributary
