// Starts a real ServiceHost on port 0 and checks what every Tributary server
// promises: reflection lists the service, health is NOT_SERVING until ready and
// again while draining, /metrics parses as Prometheus text and counts RPCs by
// code, the port file is right, and TLS / mutual TLS work from PEM files.
#include "common/service_host.h"

#include <fstream>
#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <prometheus/text_serializer.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/channel.h"
#include "common/testing/prometheus_text.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/coordinator.grpc.pb.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace tributary {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::Contains;

constexpr char kServiceName[] = "tributary.v1.Coordinator";

std::string TestDataPath(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tributary/common/testdata/" + name;
}

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

ServerOptions LoopbackOptions() {
  ServerOptions options;
  options.name = "test";
  options.listen_address = "127.0.0.1:0";
  options.http_host = "127.0.0.1";
  options.http_port = 0;
  options.drain_grace = absl::Milliseconds(600);
  return options;
}

// grpc.health.v1.Health/Check: the status, or the RPC's error code as a negative number.
int CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status status = Health::NewStub(channel)->Check(&context, request, &response);
  if (!status.ok()) return -static_cast<int>(status.error_code());
  return response.status();
}

std::vector<std::string> ReflectedServices(const std::shared_ptr<grpc::Channel>& channel) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto stub = ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  ServerReflectionRequest request;
  request.set_list_services("");
  EXPECT_TRUE(stream->Write(request));
  stream->WritesDone();
  ServerReflectionResponse response;
  std::vector<std::string> names;
  while (stream->Read(&response)) {
    for (const auto& service : response.list_services_response().service()) {
      names.push_back(service.name());
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  return names;
}

std::string ReflectedFileFor(const std::shared_ptr<grpc::Channel>& channel,
                             const std::string& symbol) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto stub = ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  ServerReflectionRequest request;
  request.set_file_containing_symbol(symbol);
  stream->Write(request);
  stream->WritesDone();
  ServerReflectionResponse response;
  std::string first_file;
  while (stream->Read(&response)) {
    if (first_file.empty() &&
        response.file_descriptor_response().file_descriptor_proto_size() > 0) {
      google::protobuf::FileDescriptorProto file;
      file.ParseFromString(response.file_descriptor_response().file_descriptor_proto(0));
      first_file = file.name();
    }
  }
  stream->Finish();
  return first_file;
}

class ServiceHostTest : public ::testing::Test {
 protected:
  v1::Coordinator::CallbackService service_;  // Every RPC answers UNIMPLEMENTED.
};

TEST_F(ServiceHostTest, ReflectionListsTheServiceAndDescribesIt) {
  ServiceHost host(LoopbackOptions());
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  auto channel = grpc::CreateChannel(host.advertised_address(),
                                     grpc::InsecureChannelCredentials());
  EXPECT_THAT(ReflectedServices(channel), Contains(kServiceName));
  EXPECT_THAT(ReflectedServices(channel), Contains("grpc.reflection.v1alpha.ServerReflection"));
  EXPECT_EQ(ReflectedFileFor(channel, kServiceName), "proto/coordinator.proto");
}

TEST_F(ServiceHostTest, HealthIsNotServingUntilReadyAndWhileDraining) {
  ServiceHost host(LoopbackOptions());
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  auto channel = grpc::CreateChannel(host.advertised_address(),
                                     grpc::InsecureChannelCredentials());
  httplib::Client http("127.0.0.1", host.http_port());

  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel, kServiceName), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(http.Get("/healthz")->status, 503);

  host.SetServing(true);
  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel, kServiceName), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel, "no.such.Service"), -grpc::StatusCode::NOT_FOUND);
  auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "SERVING\n");

  // Drain: health must read NOT_SERVING while the server still answers.
  std::thread drain([&host] { host.Shutdown(); });
  int seen = HealthCheckResponse::SERVING;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (seen == HealthCheckResponse::SERVING && absl::Now() < give_up) {
    seen = CheckHealth(channel, kServiceName);
  }
  EXPECT_EQ(seen, HealthCheckResponse::NOT_SERVING);
  drain.join();
  // After the drain the server is gone.
  EXPECT_LT(CheckHealth(channel, ""), 0);
}

TEST_F(ServiceHostTest, MetricsParseAndCountRpcsByCode) {
  ServiceHost host(LoopbackOptions());
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  host.SetServing(true);
  auto channel = grpc::CreateChannel(host.advertised_address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    v1::Job job;
    EXPECT_EQ(stub->GetJob(&context, v1::GetJobRequest(), &job).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::SERVING);

  httplib::Client http("127.0.0.1", host.http_port());
  auto response = http.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  absl::StatusOr<testing::ParsedMetrics> metrics = testing::ParsePrometheusText(response->body);
  ASSERT_TRUE(metrics.ok()) << metrics.status() << "\n" << response->body;
  EXPECT_EQ(metrics->Sum("tributary_rpc_total",
                         "code=\"UNIMPLEMENTED\",method=\"/tributary.v1.Coordinator/GetJob\""),
            3);
  EXPECT_EQ(metrics->Sum("tributary_rpc_duration_seconds_count",
                         "/tributary.v1.Coordinator/GetJob"),
            3);
  EXPECT_EQ(metrics->types.at("tributary_rpc_total"), "counter");
}

TEST_F(ServiceHostTest, WritesThePortFile) {
  ServerOptions options = LoopbackOptions();
  options.port_file = TempPath("ports.json");
  ServiceHost host(options);
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  std::ifstream in(options.port_file);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(contents.find("\"grpc_port\":" + std::to_string(host.grpc_port())),
            std::string::npos)
      << contents;
  EXPECT_NE(contents.find("\"http_port\":" + std::to_string(host.http_port())),
            std::string::npos)
      << contents;
}

TEST_F(ServiceHostTest, BusyPortIsAClearError) {
  ServiceHost first(LoopbackOptions());
  first.AddService(&service_, kServiceName);
  ASSERT_TRUE(first.Start().ok());
  ServerOptions options = LoopbackOptions();
  options.listen_address = "127.0.0.1:" + std::to_string(first.grpc_port());
  v1::Coordinator::CallbackService other;
  ServiceHost second(options);
  second.AddService(&other, kServiceName);
  absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find(options.listen_address), std::string::npos) << status;
}

TEST_F(ServiceHostTest, MutualTlsAcceptsOnlyClientsWithACertificate) {
  ServerOptions options = LoopbackOptions();
  options.tls = {TestDataPath("server.pem"), TestDataPath("server.key"), TestDataPath("ca.pem")};
  ServiceHost host(options);
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  host.SetServing(true);
  const std::string address = "localhost:" + std::to_string(host.grpc_port());

  ChannelOptions with_cert;
  with_cert.tls = {TestDataPath("client.pem"), TestDataPath("client.key"), TestDataPath("ca.pem")};
  auto good = MakeChannel(address, with_cert);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(CheckHealth(*good, ""), HealthCheckResponse::SERVING);

  ChannelOptions without_cert;
  without_cert.tls = {"", "", TestDataPath("ca.pem")};
  auto anonymous = MakeChannel(address, without_cert);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_LT(CheckHealth(*anonymous, ""), 0);

  auto plaintext = MakeChannel(address, ChannelOptions());
  ASSERT_TRUE(plaintext.ok());
  EXPECT_LT(CheckHealth(*plaintext, ""), 0);
}

TEST_F(ServiceHostTest, TlsConfigurationErrorsNameTheFile) {
  ServerOptions only_cert = LoopbackOptions();
  only_cert.tls.cert = TestDataPath("server.pem");
  ServiceHost host(only_cert);
  EXPECT_EQ(host.Start().code(), absl::StatusCode::kInvalidArgument);

  ServerOptions missing = LoopbackOptions();
  missing.tls = {"/nonexistent/cert.pem", TestDataPath("server.key"), ""};
  ServiceHost host2(missing);
  absl::Status status = host2.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("/nonexistent/cert.pem"), std::string::npos) << status;

  // A key of another certificate: said so, naming both files (it used to fail later as
  // "address in use or not local?").
  ServerOptions mismatched = LoopbackOptions();
  mismatched.tls = {TestDataPath("server.pem"), TestDataPath("client.key"), ""};
  ServiceHost host3(mismatched);
  absl::Status wrong_key = host3.Start();
  EXPECT_EQ(wrong_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_key.message().find("does not match the certificate"), std::string::npos)
      << wrong_key;
  EXPECT_NE(wrong_key.message().find("client.key"), std::string::npos) << wrong_key;
  EXPECT_NE(wrong_key.message().find("server.pem"), std::string::npos) << wrong_key;
  EXPECT_EQ(wrong_key.message().find("address in use"), std::string::npos) << wrong_key;

  // A certificate file holding a key instead.
  ServerOptions swapped = LoopbackOptions();
  swapped.tls = {TestDataPath("server.key"), TestDataPath("server.key"), ""};
  ServiceHost host4(swapped);
  absl::Status no_cert = host4.Start();
  EXPECT_EQ(no_cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_cert.message().find("no PEM certificate"), std::string::npos) << no_cert;

  // A CA file that is not PEM (issue 23: it exited with "address in use or not local?"),
  // or that is missing: named with its flag.
  for (const std::string& ca : {TestDataPath("server.key"), std::string("/nonexistent/ca.pem")}) {
    ServerOptions bad_ca = LoopbackOptions();
    bad_ca.tls = {TestDataPath("server.pem"), TestDataPath("server.key"), ca};
    ServiceHost host5(bad_ca);
    absl::Status refused = host5.Start();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("--tls_ca=" + ca), std::string::npos) << refused;
    EXPECT_EQ(refused.message().find("address in use"), std::string::npos) << refused;
    // The same file on the client side.
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client =
        MakeChannelCredentials(TlsFiles{"", "", ca});
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
    EXPECT_NE(client.status().message().find("--tls_ca=" + ca), std::string::npos);
  }
}

// Requests that do not parse, and methods that do not exist, get a reason (issue 23:
// 84% of fuzzed requests were answered UNIMPLEMENTED with an empty message).
TEST_F(ServiceHostTest, UnparsableRequestsAreInvalidArgumentsAndUnknownMethodsSaySo) {
  ServiceHost host(LoopbackOptions());
  host.AddService(&service_, kServiceName);
  ASSERT_TRUE(host.Start().ok());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", host.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  auto call = [&](const std::string& method, const std::string& bytes) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&done](grpc::Status status) { done.set_value(status); });
    return done.get_future().get();
  };
  const std::string garbage("\xff\xff\xff\xff\xff", 5);  // An unfinished varint tag.
  const grpc::Status unparsable = call("/tributary.v1.Coordinator/GetJob", garbage);
  EXPECT_EQ(unparsable.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << unparsable.error_message();
  EXPECT_NE(unparsable.error_message().find(
                "/tributary.v1.Coordinator/GetJob: the request is not a valid "
                "tributary.v1.GetJobRequest message"),
            std::string::npos)
      << unparsable.error_message();
  // A request that parses reaches the service (this one implements nothing).
  EXPECT_EQ(call("/tributary.v1.Coordinator/GetJob", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  const grpc::Status unknown = call("/tributary.v1.Coordinator/NoSuchMethod", garbage);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(unknown.error_message().find("no method /tributary.v1.Coordinator/NoSuchMethod"),
            std::string::npos)
      << unknown.error_message();
  // Counted under its method, and unknown methods under one name whatever they are.
  for (int i = 0; i < 3; ++i) call(absl::StrCat("/x.Y/Made", i), "");
  const std::string metrics = prometheus::TextSerializer().Serialize(host.registry()->Collect());
  EXPECT_NE(metrics.find("code=\"INVALID_ARGUMENT\",method=\"/tributary.v1.Coordinator/GetJob\""),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("/x.Y/Made"), std::string::npos) << "one series per made-up name";
  EXPECT_NE(metrics.find("method=\"unknown\""), std::string::npos);
}

}  // namespace
}  // namespace tributary
