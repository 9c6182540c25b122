#include "common/service_host.h"

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_metrics.h"
#include "common/rpc_answers.h"
#include "common/rpc_metrics.h"
#include "common/server_flags.h"
#include "grpc/health/v1/health.pb.h"

namespace tributary {
namespace {

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string DeriveAdvertisedHost(const std::string& listen_address) {
  const std::string host = HostOf(listen_address);
  if (host == "127.0.0.1" || host == "localhost" || host == "[::1]") return "127.0.0.1";
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  return "127.0.0.1";
}

}  // namespace

ServerOptions ServerOptions::FromFlags(std::string name, std::string listen_address, int http_port,
                                       int64_t max_receive_bytes) {
  ServerOptions options;
  options.name = std::move(name);
  options.listen_address = std::move(listen_address);
  options.http_port = http_port;
  // The HTTP side port listens where gRPC does (loopback stays loopback).
  const std::string host = HostOf(options.listen_address);
  options.http_host = host == "localhost" ? "127.0.0.1" : host;
  options.max_receive_bytes = max_receive_bytes;
  options.tls = TlsFilesFromFlags();
  options.drain_grace = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  return options;
}

int64_t MaxReceiveBytesForPartition(int64_t partition_bytes) { return partition_bytes + (1 << 20); }

ServiceHost::ServiceHost(ServerOptions options)
    : options_(std::move(options)), registry_(std::make_shared<prometheus::Registry>()) {
  if (options_.http_port >= 0) {
    http_ = std::make_unique<HttpServer>(registry_, [this] { return serving_.load(); });
    http_->AddCollectable(std::make_shared<ProcessCollector>());
  }
}

ServiceHost::~ServiceHost() { Shutdown(absl::ZeroDuration()); }

void ServiceHost::AddService(grpc::Service* service, const std::string& full_name) {
  services_.emplace_back(service, full_name);
}

absl::Status ServiceHost::Start() {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options_.tls);
  if (!credentials.ok()) return credentials.status();

  // Both are process-wide switches read when a builder is created.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The default health service is written against upb, so grpc.health.v1's protobuf
  // descriptors are in no pool unless something links them in: without this, reflection
  // lists grpc.health.v1.Health but cannot describe it, and grpcurl's Health/Check fails
  // with "Symbol not found" (gRPC issue 36665).
  grpc::health::v1::HealthCheckRequest::descriptor();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen_address, *credentials, &grpc_port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_receive_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options_.max_receive_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients ping every 20 s; allow down to 5 s so a client tuned lower is not cut off.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC binds with SO_REUSEPORT by default: a second server on a busy port would then
  // silently share its traffic instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::vector<std::string> names;
  for (const auto& [service, name] : services_) names.push_back(name);
  std::shared_ptr<const KnownMethods> methods = KnownMethodsOf(names);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // First the answers (a status is amended before it is counted), then the counts.
  interceptors.push_back(std::make_unique<RpcAnswersInterceptorFactory>(methods));
  interceptors.push_back(std::make_unique<RpcMetricsInterceptorFactory>(*registry_, methods));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  for (const auto& [service, name] : services_) builder.RegisterService(service);

  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", options_.listen_address,
                                               " (address in use or not local?)"));
  }
  SetServing(false);

  if (http_ != nullptr) {
    absl::Status http_status = http_->Start(options_.http_host, options_.http_port);
    if (!http_status.ok()) {
      server_->Shutdown();
      return http_status;
    }
  }
  advertised_host_ = options_.advertise_host.empty() ? DeriveAdvertisedHost(options_.listen_address)
                                                     : options_.advertise_host;
  if (absl::Status written = WritePortFile(); !written.ok()) return written;
  LOG(INFO) << options_.name << " listening on " << HostOf(options_.listen_address) << ":"
            << grpc_port_ << " (gRPC" << (options_.tls.enabled() ? ", TLS" : ", plaintext")
            << "), advertised as " << advertised_address()
            << (http_ != nullptr ? absl::StrCat("; HTTP /metrics /healthz on ", options_.http_host,
                                                ":", http_->port())
                                 : std::string());
  return absl::OkStatus();
}

absl::Status ServiceHost::WritePortFile() const {
  if (options_.port_file.empty()) return absl::OkStatus();
  const std::string temp = options_.port_file + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << "{\"grpc_port\":" << grpc_port_ << ",\"http_port\":" << http_port()
        << ",\"pid\":" << getpid() << "}\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write port file ", temp));
  }
  if (std::rename(temp.c_str(), options_.port_file.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ", options_.port_file));
  }
  return absl::OkStatus();
}

void ServiceHost::SetServing(bool serving) {
  if (server_ == nullptr || shut_down_) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);
  for (const auto& [service, name] : services_) health->SetServingStatus(name, serving);
  serving_ = serving;
}

void ServiceHost::Shutdown(absl::Duration deadline) {
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  serving_ = false;
  // Health goes NOT_SERVING for good (later SetServingStatus calls are ignored).
  server_->GetHealthCheckService()->Shutdown();
  if (options_.drain_grace > absl::ZeroDuration() && deadline > absl::ZeroDuration()) {
    LOG(INFO) << options_.name << " NOT_SERVING; draining for "
              << absl::FormatDuration(options_.drain_grace);
    absl::SleepFor(options_.drain_grace);
  }
  const absl::Time before = absl::Now();
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  if (absl::Now() - before > absl::Seconds(1)) {
    LOG(WARNING) << options_.name << ": gRPC took " << absl::FormatDuration(absl::Now() - before)
                 << " to shut down (calls still in flight, given up to "
                 << absl::FormatDuration(deadline) << ")";
  }
  if (http_ != nullptr) http_->Stop();
  LOG(INFO) << options_.name << " stopped";
}

int ServiceHost::http_port() const { return http_ != nullptr ? http_->port() : -1; }

std::string ServiceHost::advertised_address() const {
  return absl::StrCat(advertised_host_, ":", grpc_port_);
}

}  // namespace tributary
