// The worker's two calls against hostile requests, over a real loopback server: a
// seeded mutation loop (common/testing/proto_mutator.h) over DrainRequest and
// GetWorkerStatusRequest from the corpus in testdata/fuzz/. Every request is answered
// with a status, and what reaches the handler is bounded (a drain reason of at most
// 1 KiB plus its count).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/channel.h"
#include "common/service_host.h"
#include "common/testing/proto_mutator.h"
#include "worker/worker_service.h"

namespace tributary::worker {
namespace {

using tributary::testing::CorpusPath;
using tributary::testing::FuzzIterations;
using tributary::testing::ProtoMutator;

class RecordingHandler : public WorkerHandler {
 public:
  v1::WorkerStatus GetStatus() override {
    v1::WorkerStatus status;
    status.set_worker_id("w1-fuzz");
    return status;
  }
  v1::WorkerPhase Drain(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    longest_ = std::max(longest_, reason.size());
    ++drains_;
    return v1::WORKER_DRAINING;
  }
  size_t longest() const {
    absl::MutexLock lock(&mu_);
    return longest_;
  }

 private:
  mutable absl::Mutex mu_;
  size_t longest_ = 0;
  int drains_ = 0;
};

template <typename T>
std::vector<T> Seeds(const std::string& type) {
  std::vector<T> seeds;
  for (auto& message : ProtoMutator::LoadCorpus(CorpusPath("worker/testdata/fuzz/" + type), T())) {
    seeds.push_back(static_cast<const T&>(*message));
  }
  return seeds;
}

TEST(WorkerRequestFuzzTest, EveryRequestIsAnsweredAndTheReasonIsBounded) {
  RecordingHandler handler;
  WorkerService service(handler);
  ServerOptions options;
  options.name = "worker";
  options.listen_address = "127.0.0.1:0";
  options.http_host = "127.0.0.1";
  options.http_port = 0;
  options.drain_grace = absl::ZeroDuration();
  ServiceHost host(options);
  host.AddService(&service, v1::Worker::service_full_name());
  ASSERT_TRUE(host.Start().ok());
  host.SetServing(true);
  auto channel = MakeChannel("127.0.0.1:" + std::to_string(host.grpc_port()), ChannelOptions());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::Worker::NewStub(*channel);
  const auto drains = Seeds<v1::DrainRequest>("drain");
  const auto statuses = Seeds<v1::GetWorkerStatusRequest>("get_status");
  ASSERT_FALSE(drains.empty() || statuses.empty());

  ProtoMutator mutator(20261127);
  int ok = 0, refused = 0;
  const int iterations = FuzzIterations(500);
  for (int i = 0; i < iterations; ++i) {
    {
      auto request = mutator.Mutate(drains[i % drains.size()]);
      grpc::ClientContext context;
      v1::DrainResponse response;
      const grpc::Status status =
          stub->Drain(&context, static_cast<const v1::DrainRequest&>(*request), &response);
      status.ok() ? ++ok : ++refused;
      if (status.ok()) {
        EXPECT_EQ(response.phase(), v1::WORKER_DRAINING);
      }
    }
    {
      auto request = mutator.Mutate(statuses[i % statuses.size()]);
      grpc::ClientContext context;
      v1::WorkerStatus response;
      const grpc::Status status = stub->GetStatus(
          &context, static_cast<const v1::GetWorkerStatusRequest&>(*request), &response);
      status.ok() ? ++ok : ++refused;
    }
  }
  // A reason far past the bound, on purpose.
  v1::DrainRequest huge;
  huge.set_reason(std::string(1 << 20, 'x'));
  grpc::ClientContext context;
  v1::DrainResponse response;
  ASSERT_TRUE(stub->Drain(&context, huge, &response).ok());
  EXPECT_LE(handler.longest(), WorkerService::kMaxDrainReasonBytes + 32);
  EXPECT_GT(ok, 0);
  std::printf("%d requests answered OK, %d refused with a status\n", ok, refused);
  host.Shutdown(absl::Seconds(2));
}

}  // namespace
}  // namespace tributary::worker
