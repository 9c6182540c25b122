// Roles from client certificates (--certificate_roles) on a real mutual-TLS server: the
// role is the one the verified certificate names, the cluster credential's role must
// match it, and a certificate naming no role or two is refused. Without certificate
// roles the secret alone decides (any holder may claim any role).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "common/channel.h"
#include "common/cluster_auth.h"
#include "common/service_host.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary {
namespace {

using ::testing::HasSubstr;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

std::string Pki(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tributary/common/testdata/roles/" + name;
}

// ListWorkers as the coordinator guards it: operator or coordinator only.
class GuardedService : public v1::Coordinator::CallbackService {
 public:
  explicit GuardedService(std::shared_ptr<const ClusterAuth> auth) : auth_(std::move(auth)) {}
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest*,
                                        v1::ListWorkersResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const absl::Status allowed =
        Authorize(auth_.get(), *context, Role::kOperator | Role::kCoordinator, "ListWorkers");
    reactor->Finish(allowed.ok() ? grpc::Status::OK
                                 : grpc::Status(static_cast<grpc::StatusCode>(allowed.code()),
                                                std::string(allowed.message())));
    return reactor;
  }

 private:
  const std::shared_ptr<const ClusterAuth> auth_;
};

class CertificateRolesTest : public ::testing::Test {
 protected:
  void Serve(std::shared_ptr<const ClusterAuth> auth) {
    service_ = std::make_unique<GuardedService>(std::move(auth));
    ServerOptions options;
    options.name = "test";
    options.listen_address = "127.0.0.1:0";
    options.http_host = "127.0.0.1";
    options.http_port = 0;
    options.drain_grace = absl::Milliseconds(100);
    options.tls = {Pki("coordinator.pem"), Pki("coordinator.key"), Pki("ca.pem")};
    host_ = std::make_unique<ServiceHost>(options);
    host_->AddService(service_.get(), "tributary.v1.Coordinator");
    ASSERT_TRUE(host_->Start().ok());
    host_->SetServing(true);
  }

  // ListWorkers with `certificate`'s key and certificate and the header of `claimed`
  // (none when null).
  grpc::Status Call(const std::string& certificate, const Role* claimed) {
    ChannelOptions options;
    options.tls = {Pki(certificate + ".pem"), Pki(certificate + ".key"), Pki("ca.pem")};
    if (claimed != nullptr) options.auth_header = secret_->HeaderFor(*claimed);
    auto channel =
        MakeChannel("localhost:" + std::to_string(host_->grpc_port()), options);
    EXPECT_TRUE(channel.ok()) << channel.status();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ListWorkersResponse response;
    return v1::Coordinator::NewStub(*channel)->ListWorkers(&context, v1::ListWorkersRequest(),
                                                           &response);
  }

  void TearDown() override {
    if (host_ != nullptr) host_->Shutdown();
  }

  std::shared_ptr<const ClusterAuth> secret_ = *ClusterAuth::FromSecret(kSecret);
  std::unique_ptr<GuardedService> service_;
  std::unique_ptr<ServiceHost> host_;
};

TEST_F(CertificateRolesTest, TheCertificateNamesTheRole) {
  Serve(secret_->WithCertificateRoles());
  const Role kOperator = Role::kOperator, kWorker = Role::kWorker;

  EXPECT_TRUE(Call("operator", &kOperator).ok());

  // A worker's certificate: not allowed here, whatever role its holder claims.
  grpc::Status worker = Call("worker", &kWorker);
  EXPECT_EQ(worker.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(worker.error_message(), HasSubstr("the worker role may not make this call"));
  grpc::Status posing = Call("worker", &kOperator);
  EXPECT_EQ(posing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(posing.error_message(),
              HasSubstr("certificate names the worker role but the cluster credential claims "
                        "operator"));

  grpc::Status none = Call("norole", &kOperator);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.error_message(), HasSubstr("names no role"));
  grpc::Status two = Call("tworoles", &kOperator);
  EXPECT_EQ(two.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(two.error_message(), HasSubstr("two roles"));

  // The secret is still needed: a right certificate without the credential is refused.
  grpc::Status no_secret = Call("operator", nullptr);
  EXPECT_EQ(no_secret.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(CertificateRolesTest, WithoutCertificateRolesTheSecretDecides) {
  Serve(secret_);
  const Role kOperator = Role::kOperator;
  // The weakness --certificate_roles removes: a worker's holder claims the operator.
  EXPECT_TRUE(Call("worker", &kOperator).ok());
  EXPECT_TRUE(Call("norole", &kOperator).ok());
  EXPECT_EQ(Call("operator", nullptr).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(CertificateRolesTest, NoClusterCredentialMeansOpen) {
  Serve(nullptr);  // --allow_unauthenticated.
  EXPECT_TRUE(Call("norole", nullptr).ok());
}

}  // namespace
}  // namespace tributary
