#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
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

absl::Status CheckKeyMatchesCertificate(const TlsFiles& files, const std::string& cert_pem,
                                        const std::string& key_pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())), BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert=", files.cert, ": no PEM certificate in the file"));
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key=", files.key, ": no PEM private key in the file (or it is encrypted)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_key=", files.key,
                                                   " does not match the certificate in --tls_cert=",
                                                   files.cert));
  }
  return absl::OkStatus();
}

namespace {

// The PEM file of `flag`: INVALID_ARGUMENT naming the flag and the path when it cannot
// be read or holds no PEM certificate (a CA bundle that is not PEM would otherwise
// surface later as a server that cannot listen, or a connection that fails).
absl::StatusOr<std::string> ReadCertificates(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": ",
                                                   pem.status().message()));
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())), BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> first(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (first == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": no PEM certificate in the file (expected one or more "
                               "'-----BEGIN CERTIFICATE-----' blocks)"));
  }
  return pem;
}

}  // namespace

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
  if (absl::Status matches = CheckKeyMatchesCertificate(files, *cert, *key); !matches.ok()) {
    return matches;
  }
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadCertificates("tls_ca", files.ca);
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
    absl::StatusOr<std::string> ca = ReadCertificates("tls_ca", files.ca);
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
