// A worker's PsConnection (worker/comm/ps_connection.h) over ParameterShard objects
// in the same process, reached by direct calls: no server, no sockets, no gRPC. For
// TrainingSession's tests and anything else that wants a node leader's view of real
// shards. Semantics follow PsClient: InitPartitions installs the job at the identity's
// generation; the latest values the shards delivered are kept until WaitUpdated
// writes them out; held pushes (BOUNDED_STALENESS) are pushed again when the shard
// says so.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_MEMORY_PS_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_MEMORY_PS_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/parameter_server/parameter_shard.h"
#include "worker/comm/ps_connection.h"

namespace tributary::ps::testing {

class InMemoryPsConnection : public worker::PsConnection {
 public:
  // `shards[i]` serves shard index i of `plan`; not owned, they outlive this.
  InMemoryPsConnection(std::vector<ParameterShard*> shards, worker::PsIdentity identity,
                       v1::PartitionPlan plan, v1::TrainingMode mode, v1::DType wire_dtype);
  ~InMemoryPsConnection() override;

  absl::StatusOr<uint64_t> InitPartitions(const v1::JobSpec& spec, uint64_t total_steps,
                                          const float* params) override;
  absl::StatusOr<uint64_t> PullAll(float* params) override;
  absl::Status Open() override;
  absl::Status Push(uint64_t step, uint32_t partition, const float* data, uint64_t sample_count,
                    uint32_t steps) override;
  // In SYNC, an expected update is copied into dst as the shard delivers it (as
  // PsClient receives it there), then the landed listener is called.
  void ExpectUpdateInto(uint32_t partition, uint64_t step, float* dst) override;
  void SetLandedListener(LandedFn listener) override { landed_listener_ = std::move(listener); }
  absl::Status WaitUpdated(uint32_t partition, uint64_t step, absl::Duration timeout,
                           float* dst) override;
  void Interrupt(const std::string& reason) override;
  void Close() override;
  uint64_t bytes_pushed() const override { return bytes_pushed_; }
  uint64_t bytes_pulled() const override { return bytes_pulled_; }

 private:
  class Sink;
  struct PartitionState {
    bool awaiting = false;
    uint64_t step = 0;
    const float* data = nullptr;
    uint64_t samples = 0;
    uint32_t steps = 1;
    std::shared_ptr<const v1::PartitionValues> latest;  // The newest values delivered.
    float* expect_dst = nullptr;  // ExpectUpdateInto, for the push of expect_step.
    uint64_t expect_step = 0;
    float* landed_at = nullptr;   // Where the update of `step` was copied, if it was.
  };
  absl::Status PushNow(uint32_t partition);
  void Delivered(std::shared_ptr<const v1::PartitionValues> values);
  void Retry(uint32_t partition);
  void RetryLoop();

  const std::vector<ParameterShard*> shards_;
  const worker::PsIdentity identity_;
  const v1::PartitionPlan plan_;
  const v1::TrainingMode mode_;
  const v1::DType wire_dtype_;
  std::vector<std::unique_ptr<Sink>> sinks_;  // By shard index.
  LandedFn landed_listener_;  // Set before Open, then only read.

  absl::Mutex mu_;
  std::vector<PartitionState> partitions_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::deque<uint32_t> retries_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread retry_thread_;

  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_pulled_{0};
};

}  // namespace tributary::ps::testing

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_TESTING_IN_MEMORY_PS_H_
