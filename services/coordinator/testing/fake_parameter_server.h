// Test double of the ParameterServer service for the coordinator's tests: answers
// GetShardStatus from settable fields and records BeginGeneration and EndJob calls,
// following the real shard's rules (a generation before the job is installed is
// recorded and refused; a generation must be newer than the current one). The data-path RPCs stay
// UNIMPLEMENTED: the coordinator never calls them.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_PARAMETER_SERVER_H_
#define TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_PARAMETER_SERVER_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.grpc.pb.h"

namespace tributary::coordinator::testing {

class FakeParameterServer : public v1::ParameterServer::CallbackService {
 public:
  explicit FakeParameterServer(uint32_t shard_index) : shard_index_(shard_index) {}

  // What a worker's InitPartitions does: install the job at the worker's generation.
  void Install(const std::string& job_id, uint64_t generation, uint32_t num_nodes,
               uint64_t resume_step);
  void SetTraffic(uint64_t step, uint64_t bytes_in, uint64_t bytes_out, double aggregation_wait);

  std::vector<v1::BeginGenerationRequest> begun() const;
  std::vector<std::string> ended() const;
  std::string job_id() const;
  uint64_t generation() const;

  grpc::ServerUnaryReactor* GetShardStatus(grpc::CallbackServerContext* context,
                                           const v1::GetShardStatusRequest* request,
                                           v1::ShardStatus* response) override;
  grpc::ServerUnaryReactor* BeginGeneration(grpc::CallbackServerContext* context,
                                            const v1::BeginGenerationRequest* request,
                                            v1::BeginGenerationResponse* response) override;
  grpc::ServerUnaryReactor* EndJob(grpc::CallbackServerContext* context,
                                   const v1::EndJobRequest* request,
                                   v1::EndJobResponse* response) override;

 private:
  const uint32_t shard_index_;
  mutable absl::Mutex mu_;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;  // generation_ was begun by a fence.
  uint32_t num_nodes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
  double aggregation_wait_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::BeginGenerationRequest> begun_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::coordinator::testing

#endif  // TRIBUTARY_SERVICES_COORDINATOR_TESTING_FAKE_PARAMETER_SERVER_H_
