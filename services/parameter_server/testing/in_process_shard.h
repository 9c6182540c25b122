// Test helper: a real parameter-server shard (ParameterShard, its executor and the
// gRPC service) on loopback inside the test process, which can be stopped and
// started again on the same port to play a shard that comes up late or restarts.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_PROCESS_SHARD_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_PROCESS_SHARD_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/service_host.h"
#include "proto/coordinator.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "services/parameter_server/data_plane.h"
#include "services/parameter_server/parameter_server_service.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"

namespace tributary::ps::testing {

class InProcessShard {
 public:
  // checkpoint_dir: where Checkpoint() writes and a restart restores from ("" = none).
  // data_plane: also serve the TCP data plane (OpenDataPlane), as the shard binary does.
  explicit InProcessShard(std::string checkpoint_dir = "", bool data_plane = true);
  ~InProcessShard();

  // Serves on 127.0.0.1:port (0: a free port, remembered for the next Start). A
  // restart restores the newest checkpoint of checkpoint_dir first.
  absl::Status Start(int port = 0);
  // Shuts the server down and forgets the shard's state (what a crash keeps is only
  // the last checkpoint).
  void Stop();
  bool running() const { return host_ != nullptr; }

  int port() const { return port_; }
  std::string address() const;
  // For an Assignment's shard map.
  v1::ShardInfo info(uint32_t shard_index) const;
  // Direct calls into the running shard (no gRPC): BeginGeneration, checkpoints.
  ParameterShard& shard() { return *shard_; }
  // Options of the data plane the next Start makes (bind_host is always 127.0.0.1),
  // and the running one (null without).
  void set_data_plane_options(DataPlaneOptions options) { data_plane_options_ = options; }
  DataPlaneServer* data_plane() { return data_plane_.get(); }

 private:
  const std::string checkpoint_dir_;
  const bool serve_data_plane_;
  DataPlaneOptions data_plane_options_;
  int port_ = 0;
  std::unique_ptr<ParameterShard> shard_;
  std::unique_ptr<PartitionExecutor> executor_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<DataPlaneServer> data_plane_;
  std::unique_ptr<ServiceHost> host_;
};

}  // namespace tributary::ps::testing

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_PROCESS_SHARD_H_
