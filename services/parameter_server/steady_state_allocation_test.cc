// The shard's push path allocates nothing in steady state: once a job runs, decoding a
// received push (common/partition_codec), summing it, completing a step (optimizer
// included) and publishing the new values reuse the stream's and the partition's
// buffers. Counted with a replacement global operator new, over many SYNC
// and ASYNC steps after a warm-up, with the sink keeping only the latest values (as a
// stream does once it has sent them).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "common/partition_codec.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/shard_test_util.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace tributary::ps {
namespace {

using testing::InitialValues;
using testing::MakeHeader;
using testing::MakePush;
using testing::MakeSpec;

constexpr int64_t kElements = 4096;  // 16 partitions of 256 bytes.
constexpr uint32_t kNodes = 3;

// Keeps the latest values of each partition in a preallocated slot.
class LatestSink : public NodeSink {
 public:
  explicit LatestSink(size_t partitions) : latest_(partitions) {}
  void Deliver(std::shared_ptr<const v1::PartitionValues> values) override {
    latest_[values->partition_id()] = std::move(values);
  }
  void Retry(uint32_t) override {}
  void End(const absl::Status&) override {}
  uint64_t version(uint32_t partition) const { return latest_[partition]->version(); }

 private:
  std::vector<std::shared_ptr<const v1::PartitionValues>> latest_;
};

long AllocationsWhilePushing(v1::TrainingMode mode, const v1::OptimizerSpec& optimizer) {
  const v1::InitHeader header =
      MakeHeader(MakeSpec(mode, optimizer, kNodes), kElements, 1, 0,
                 "job-1-longer-than-a-short-string", /*total_steps=*/1000);
  ParameterShard shard(ShardOptions{}, nullptr);
  auto init = shard.Init(header, InitialValues(header, std::vector<float>(kElements, 1.0f)));
  EXPECT_TRUE(init.ok()) << init.status();
  const uint32_t partitions = static_cast<uint32_t>(header.plan().partitions_size());
  std::vector<LatestSink> sinks(kNodes, LatestSink(partitions));

  constexpr uint64_t kWarmup = 5, kMeasured = 40;
  // Every push of every step, built before anything is counted.
  std::vector<float> gradient(kElements);
  for (int64_t i = 0; i < kElements; ++i) gradient[i] = 0.001f * static_cast<float>(i % 17);
  // As they arrive on the wire (the job id is longer than a short string's buffer).
  std::vector<grpc::ByteBuffer> pushes;
  for (uint64_t step = 0; step < kWarmup + kMeasured; ++step) {
    for (uint32_t p = 0; p < partitions; ++p) {
      for (uint32_t node = 0; node < kNodes; ++node) {
        const std::string bytes =
            MakePush(header, 0, step, node, p, gradient, 8).SerializeAsString();
        grpc::Slice slice(bytes);
        pushes.emplace_back(&slice, 1);
      }
    }
  }
  // A stream's read slot, reused for every push.
  ReceivedMessage received;
  GradientPushView view;
  size_t next = 0;
  auto run_step = [&] {
    for (uint32_t p = 0; p < partitions; ++p) {
      for (uint32_t node = 0; node < kNodes; ++node) {
        if (absl::Status decoded = DecodeGradientPush(pushes[next++], &received, &view);
            !decoded.ok()) {
          ADD_FAILURE() << decoded;
          continue;
        }
        absl::StatusOr<PushResult> result = shard.Push(view, &sinks[node]);
        if (!result.ok() || *result != PushResult::kAccepted) {
          ADD_FAILURE() << "push " << next << ": "
                        << (result.ok() ? "not accepted" : result.status().ToString());
        }
      }
    }
  };
  for (uint64_t step = 0; step < kWarmup; ++step) run_step();
  allocations = 0;
  counting = true;
  for (uint64_t step = 0; step < kMeasured; ++step) run_step();
  counting = false;
  // The steps were applied: every partition took one update per push (ASYNC) or per
  // step (SYNC).
  const uint64_t steps = kWarmup + kMeasured;
  EXPECT_EQ(sinks[0].version(0), mode != v1::ASYNC ? steps : steps * kNodes - (kNodes - 1))
      << "node 0 last heard of partition 0";
  return allocations.load();
}

TEST(SteadyStateAllocationTest, SyncPushesAllocateNothing) {
  v1::OptimizerSpec adam;
  adam.set_type(v1::ADAM);
  adam.set_learning_rate(0.001f);
  EXPECT_EQ(AllocationsWhilePushing(v1::SYNC, testing::Sgd(0.1f)), 0);
  EXPECT_EQ(AllocationsWhilePushing(v1::SYNC, adam), 0);
  // LOCAL_SGD's rounds of one step each: the outer optimizer's (default SGD) updates.
  EXPECT_EQ(AllocationsWhilePushing(v1::LOCAL_SGD, testing::Sgd(0.1f)), 0);
}

TEST(SteadyStateAllocationTest, AsyncPushesAllocateNothing) {
  EXPECT_EQ(AllocationsWhilePushing(v1::ASYNC, testing::Sgd(0.1f)), 0);
}

}  // namespace
}  // namespace tributary::ps
