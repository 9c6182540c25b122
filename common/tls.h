// TLS and mutual TLS from PEM files, for servers and for the channels between
// services. With no files given everything is plaintext (the loopback default).
#ifndef TRIBUTARY_COMMON_TLS_H_
#define TRIBUTARY_COMMON_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace tributary {

// Paths to PEM files. cert+key enable TLS; ca additionally makes it mutual: a server
// then requires and verifies client certificates, a client verifies the server with it.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;

  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// From --tls_cert / --tls_key / --tls_ca (declared in common/server_flags.h).
TlsFiles TlsFilesFromFlags();

// Reads a whole file; NOT_FOUND / INTERNAL naming the path otherwise.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Insecure credentials when !files.enabled(). A server needs both cert and key.
// OK when the PEM private key `key_pem` belongs to the first certificate of
// `cert_pem`; INVALID_ARGUMENT naming the files otherwise (no certificate, no key,
// or a key of another certificate).
absl::Status CheckKeyMatchesCertificate(const TlsFiles& files, const std::string& cert_pem,
                                        const std::string& key_pem);

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);

// A client uses ca to verify servers (system roots when empty) and presents cert+key
// when both are given (mutual TLS).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_TLS_H_
