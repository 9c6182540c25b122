// What a caller who holds the cluster secret (every worker does) can make of it, for the
// security tests: credentials derived from the secret, and calls made with them.
#ifndef TRIBUTARY_TESTS_SECURITY_FORGERY_H_
#define TRIBUTARY_TESTS_SECURITY_FORGERY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "proto/job.pb.h"

namespace tributary::testing {

// HMAC-SHA256(secret of `token_file`, message) in hex: how worker and node credentials
// were made before the coordinator issued its own ("tributary-worker:<id>",
// "tributary-node:<job>/<generation>/<rank>"), i.e. what an insider would forge.
std::string DerivedFromTheSecret(const std::string& token_file, const std::string& message);

// Who makes a forged call.
struct Caller {
  std::string name;
  std::string auth_header;        // x-tributary-auth; empty = none.
  std::string node_credential;    // x-tributary-node; empty = none.
  std::string worker_credential;  // x-tributary-worker; empty = none.
};

std::unique_ptr<grpc::ClientContext> ContextOf(const Caller& caller);

// A channel without any credential of its own.
std::shared_ptr<grpc::Channel> Plain(const std::string& address);

// A PushPull stream to the shard at `address` that pushes one gradient of `elements`
// floats for partition 0 as node `node_rank` at the job's generation and step; how
// the stream ended.
grpc::Status ForgedPush(const std::string& address, const Caller& caller, const v1::Job& job,
                        uint32_t node_rank, uint32_t elements);

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_SECURITY_FORGERY_H_
