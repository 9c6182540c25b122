// KvGlooStore over the coordinator's rendezvous KV through real gRPC: the KV served
// in-process on port 0 (services/coordinator/testing/rendezvous_server.h), several threads playing the worker processes of one
// node, each with its own rendezvous client. set/get/wait, timeouts, conflicting
// writes, scoping and an expired id first; then Gloo builds a full mesh through the
// store and runs a real allreduce and broadcast across the threads.
#include "worker/comm/gloo_store.h"

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "services/coordinator/rendezvous_store.h"
#include "services/coordinator/testing/rendezvous_server.h"
#include "worker/comm/rendezvous_client.h"

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kTimeout{20000};  // Only reached when broken.

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    static_cast<float*>(out)[i] = static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
  }
}

// The coordinator's rendezvous KV, served alone (services/coordinator/testing).
class CoordinatorServer {
 public:
  CoordinatorServer() { EXPECT_TRUE(server_.started().ok()) << server_.started(); }

  // A client of its own, as each worker process has.
  std::unique_ptr<RendezvousClient> Client(const std::string& rendezvous_id) {
    return MakeCoordinatorRendezvousClient(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_.port()),
                            grpc::InsecureChannelCredentials()),
        rendezvous_id);
  }
  coordinator::RendezvousStore& rendezvous() { return server_.store(); }

 private:
  coordinator::testing::RendezvousServer server_;
};

// Until `count` waits are pending on the coordinator; false after 30 s (a hang).
bool WaitersPending(CoordinatorServer& server, uint64_t count) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (server.rendezvous().stats().waiting < count) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// What Gloo's exception says, or "" when the call did not throw.
template <typename Fn>
std::string Thrown(Fn&& fn) {
  try {
    fn();
  } catch (const gloo::IoException& e) {
    return e.what();
  }
  return "";
}

TEST(KvGlooStoreTest, SetGetAndWaitAcrossThreadsThroughTheCoordinator) {
  CoordinatorServer server;
  server.rendezvous().Open("node-a/gen-1");
  auto client0 = server.Client("node-a/gen-1");
  auto client1 = server.Client("node-a/gen-1");
  KvGlooStore store0(*client0, "gloo", kTimeout);
  KvGlooStore store1(*client1, "gloo", kTimeout);

  store0.set("rank0", Bytes("address of rank 0"));
  EXPECT_EQ(store1.get("rank0"), Bytes("address of rank 0"));
  // The same value again is fine (a retried write); another value is refused.
  store0.set("rank0", Bytes("address of rank 0"));
  EXPECT_THAT(Thrown([&] { store1.set("rank0", Bytes("something else")); }),
              HasSubstr("already holds a different value"));

  // get and wait block until another thread publishes.
  std::vector<char> got;
  absl::Notification waited;
  std::thread waiter([&] {
    store1.wait({"rank0", "rank2"});
    waited.Notify();
    got = store1.get("rank2");
  });
  ASSERT_TRUE(WaitersPending(server, 1));
  EXPECT_FALSE(waited.HasBeenNotified());
  auto client2 = server.Client("node-a/gen-1");
  KvGlooStore store2(*client2, "gloo", kTimeout);
  store2.set("rank2", Bytes(std::string("\0binary\xff", 8)));
  waiter.join();
  EXPECT_TRUE(waited.HasBeenNotified());
  EXPECT_EQ(got, Bytes(std::string("\0binary\xff", 8)));

  // Timeouts name the missing (scoped) key; another prefix is another key space.
  EXPECT_THAT(Thrown([&] {
                store0.wait({"rank0", "never"}, std::chrono::milliseconds(200));
              }),
              HasSubstr("gloo/never"));
  KvGlooStore other(*client0, "other", std::chrono::milliseconds(200));
  EXPECT_THAT(Thrown([&] { other.get("rank0"); }), HasSubstr("other/rank0"));
}

TEST(KvGlooStoreTest, AWaiterLearnsThatItsGenerationEnded) {
  CoordinatorServer server;
  server.rendezvous().Open("node-a/gen-1");
  auto client = server.Client("node-a/gen-1");
  KvGlooStore store(*client, "gloo", kTimeout);
  std::string error;
  std::thread waiter([&] { error = Thrown([&] { store.get("rank1"); }); });
  ASSERT_TRUE(WaitersPending(server, 1));
  server.rendezvous().Close("node-a/gen-1", "generation 2 formed");
  waiter.join();
  EXPECT_THAT(error, HasSubstr("expired while waiting: generation 2 formed"));
  // And a late caller hears the same.
  EXPECT_THAT(Thrown([&] { store.set("rank1", Bytes("x")); }), HasSubstr("generation 2 formed"));
}

TEST(KvGlooStoreTest, GlooAllreduceAndBroadcastOverTheStore) {
  CoordinatorServer server;
  server.rendezvous().Open("node-b/gen-3");
  constexpr int kRanks = 3;
  constexpr size_t kElements = 1000;
  std::vector<std::vector<float>> summed(kRanks), broadcast(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      errors[rank] = Thrown([&] {
        auto client = server.Client("node-b/gen-3");
        KvGlooStore store(*client, "gloo", kTimeout);
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(rank, kRanks);
        context->setTimeout(kTimeout);
        context->connectFullMesh(store, device);

        summed[rank].resize(kElements);
        for (size_t i = 0; i < kElements; ++i) summed[rank][i] = float(rank + 1) * i;
        gloo::AllreduceOptions sum(context);
        sum.setOutput(summed[rank].data(), kElements);
        sum.setReduceFunction(SumFloats);
        sum.setTag(1);
        gloo::allreduce(sum);

        broadcast[rank].assign(kElements, float(rank));
        gloo::BroadcastOptions from_one(context);
        from_one.setOutput(broadcast[rank].data(), kElements);
        from_one.setRoot(1);
        from_one.setTag(2);
        gloo::broadcast(from_one);
      });
    });
  }
  for (std::thread& thread : ranks) thread.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_EQ(errors[rank], "") << "rank " << rank;
    for (size_t i = 0; i < kElements; ++i) {
      ASSERT_EQ(summed[rank][i], 6.0f * i) << "rank " << rank << " element " << i;  // 1+2+3
      ASSERT_EQ(broadcast[rank][i], 1.0f) << "rank " << rank << " element " << i;
    }
  }
}

}  // namespace
}  // namespace tributary::worker
