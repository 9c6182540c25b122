#include "common/server_flags.h"

#include "absl/flags/flag.h"

// --- Security ---
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process. With --tls_key, serves TLS and presents "
          "it to other services. Default: empty (plaintext).");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key matching --tls_cert. Default: empty (plaintext).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle. Servers require and verify client certificates signed by it "
          "(mutual TLS); clients verify servers with it. Default: empty.");

ABSL_FLAG(std::string, cluster_token_file, "",
          "File holding the cluster secret (16-4096 bytes) that every component of the "
          "cluster shares: internal calls carry a role credential made from it and are "
          "refused without one (docs/security.md). Default: empty (none: servers then need "
          "--allow_unauthenticated).");
ABSL_FLAG(bool, certificate_roles, false,
          "Take each caller's role from its verified client certificate (a URI subject "
          "alternative name spiffe://<trust domain>/tributary/<role>) instead of from the "
          "cluster secret alone; the credential's role must match. Needs "
          "--cluster_token_file and mutual TLS (--tls_cert, --tls_key, --tls_ca). "
          "Default: false.");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "Serve without --cluster_token_file: anyone who reaches the ports may make every "
          "internal call. Only for development on a trusted network. Default: false.");

// --- Lifecycle ---
ABSL_FLAG(double, drain_seconds, 2.0,
          "Seconds between going NOT_SERVING on SIGTERM/SIGINT and shutting the gRPC server "
          "down, so load balancers and peers notice. Default: 2.");
ABSL_FLAG(std::string, port_file, "",
          "Write {\"grpc_port\":N,\"http_port\":M} to this file once serving (useful with "
          "port 0). Written atomically. Default: empty (not written).");
ABSL_FLAG(std::string, advertise_host, "",
          "Host name or IP other services use to reach this process. Default: empty "
          "(the machine's host name; 127.0.0.1 when listening on loopback).");
