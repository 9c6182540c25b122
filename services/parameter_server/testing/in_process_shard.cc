#include "services/parameter_server/testing/in_process_shard.h"

#include "absl/strings/str_cat.h"

namespace tributary::ps::testing {

InProcessShard::InProcessShard(std::string checkpoint_dir, bool data_plane)
    : checkpoint_dir_(std::move(checkpoint_dir)), serve_data_plane_(data_plane) {}

InProcessShard::~InProcessShard() { Stop(); }

absl::Status InProcessShard::Start(int port) {
  if (host_ != nullptr) return absl::FailedPreconditionError("the shard is already running");
  if (port != 0) port_ = port;
  ServerOptions server;
  server.name = "parameter_server";
  server.listen_address = absl::StrCat("127.0.0.1:", port_);
  server.http_host = "127.0.0.1";
  server.http_port = -1;
  server.drain_grace = absl::ZeroDuration();
  server.max_receive_bytes = MaxReceiveBytesForPartition(4 << 20);
  ShardOptions options;
  options.checkpoint_dir = checkpoint_dir_;
  shard_ = std::make_unique<ParameterShard>(options, nullptr);
  if (!checkpoint_dir_.empty()) {
    absl::StatusOr<std::string> restored = shard_->RestoreFromCheckpointDirectory();
    if (!restored.ok()) return restored.status();
  }
  executor_ = std::make_unique<PartitionExecutor>(2);
  service_ = std::make_unique<ParameterServerService>(shard_.get(), executor_.get());
  if (serve_data_plane_) {
    DataPlaneOptions data_options = data_plane_options_;
    data_options.bind_host = "127.0.0.1";
    data_plane_ = std::make_unique<DataPlaneServer>(shard_.get(), executor_.get(), data_options);
    if (absl::Status started = data_plane_->Start(); !started.ok()) return started;
    service_->set_data_plane(data_plane_.get());
  }
  host_ = std::make_unique<ServiceHost>(server);
  host_->AddService(service_.get(), v1::ParameterServer::service_full_name());
  if (absl::Status started = host_->Start(); !started.ok()) {
    host_.reset();
    return started;
  }
  host_->SetServing(true);
  port_ = host_->grpc_port();
  return absl::OkStatus();
}

void InProcessShard::Stop() {
  if (host_ == nullptr) return;
  if (data_plane_ != nullptr) data_plane_->Shutdown();
  host_->Shutdown(absl::Seconds(2));
  host_.reset();
  data_plane_.reset();
  service_.reset();
  executor_.reset();
  shard_.reset();
}

std::string InProcessShard::address() const { return absl::StrCat("127.0.0.1:", port_); }

v1::ShardInfo InProcessShard::info(uint32_t shard_index) const {
  v1::ShardInfo info;
  info.set_shard_index(shard_index);
  info.set_address(address());
  return info;
}

}  // namespace tributary::ps::testing
