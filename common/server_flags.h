// Flags every Tributary binary shares (TLS, drain, port file). They are declared
// once here rather than in each main so the three binaries cannot drift apart;
// flags specific to one binary live in its main.
#ifndef TRIBUTARY_COMMON_SERVER_FLAGS_H_
#define TRIBUTARY_COMMON_SERVER_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, cluster_token_file);
ABSL_DECLARE_FLAG(bool, allow_unauthenticated);
ABSL_DECLARE_FLAG(bool, certificate_roles);
ABSL_DECLARE_FLAG(double, drain_seconds);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(std::string, advertise_host);

#endif  // TRIBUTARY_COMMON_SERVER_FLAGS_H_
