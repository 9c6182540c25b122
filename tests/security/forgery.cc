#include "tests/security/forgery.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chrono>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "common/cluster_auth.h"
#include "proto/parameter_server.grpc.pb.h"

namespace tributary::testing {

std::string DerivedFromTheSecret(const std::string& token_file, const std::string& message) {
  std::ifstream in(token_file);
  std::string secret;
  std::getline(in, secret);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::unique_ptr<grpc::ClientContext> ContextOf(const Caller& caller) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!caller.auth_header.empty()) context->AddMetadata(kClusterAuthMetadata, caller.auth_header);
  if (!caller.node_credential.empty()) {
    context->AddMetadata(kNodeCredentialMetadata, caller.node_credential);
  }
  if (!caller.worker_credential.empty()) {
    context->AddMetadata(kWorkerCredentialMetadata, caller.worker_credential);
  }
  return context;
}

std::shared_ptr<grpc::Channel> Plain(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

grpc::Status ForgedPush(const std::string& address, const Caller& caller, const v1::Job& job,
                        uint32_t node_rank, uint32_t elements) {
  auto stub = v1::ParameterServer::NewStub(Plain(address));
  auto context = ContextOf(caller);
  auto stream = stub->PushPull(context.get());
  v1::GradientPush push;
  push.set_job_id(job.job_id());
  push.set_generation(job.generation());
  push.set_step(job.step());
  push.set_node_rank(node_rank);
  push.set_partition_id(0);
  push.set_dtype(v1::FLOAT32);
  push.set_sample_count(64);
  push.set_data(std::string(elements * sizeof(float), '\x7f'));
  stream->Write(push);
  stream->WritesDone();
  v1::PartitionValues values;
  while (stream->Read(&values)) {
  }
  return stream->Finish();
}

}  // namespace tributary::testing
