// LaneKeeper over lanes in memory: which lane a push goes on, updates reaching the
// owner, a broken lane replaced and its pushes asked for again, refusals and an
// unreachable shard failing the owner, `auto` falling back to gRPC when the data port
// fails and moving back when it answers, `tcp` returning the data plane's error, and
// Close ending readers blocked on their lanes. No gRPC server, no sockets.
#include "worker/comm/lane_keeper.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tributary::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kPatience = absl::Seconds(20);

// What a test sees of one lane, kept after the keeper dropped the lane itself.
struct LaneState {
  LaneState(size_t slot, bool tcp) : slot(slot), tcp(tcp) {}
  const size_t slot;
  const bool tcp;
  absl::Mutex mu;
  std::deque<uint32_t> updates ABSL_GUARDED_BY(mu);  // Partition ids to deliver.
  std::vector<uint32_t> written ABSL_GUARDED_BY(mu);  // Partition ids pushed.
  bool ended ABSL_GUARDED_BY(mu) = false;
  absl::Status how ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;

  void Deliver(uint32_t partition) {
    absl::MutexLock lock(&mu);
    updates.push_back(partition);
  }
  void End(absl::Status status) {
    absl::MutexLock lock(&mu);
    if (ended) return;
    ended = true;
    how = std::move(status);
  }
  std::vector<uint32_t> Written() {
    absl::MutexLock lock(&mu);
    return written;
  }
  bool WasShutDown() {
    absl::MutexLock lock(&mu);
    return shut_down;
  }
};

class FakeLane : public PushPullLane {
 public:
  explicit FakeLane(std::shared_ptr<LaneState> state) : state_(std::move(state)) {}
  bool is_tcp() const override { return state_->tcp; }
  bool Write(const PushHeader& header, const char*, size_t, AnswerInto) override {
    absl::MutexLock lock(&state_->mu);
    if (state_->ended) return false;
    state_->written.push_back(header.partition_id);
    return true;
  }
  LaneRead Read(ReceivedMessage&, PartitionValuesView& values, absl::Status* status) override {
    LaneState& s = *state_;
    absl::MutexLock lock(&s.mu);
    s.mu.Await(absl::Condition(
        +[](LaneState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
          return !s->updates.empty() || s->ended;
        },
        &s));
    if (!s.updates.empty()) {
      values = PartitionValuesView{};
      values.partition_id = s.updates.front();
      s.updates.pop_front();
      *status = absl::OkStatus();
      return LaneRead::kMessage;
    }
    *status = s.how;
    return LaneRead::kEnded;
  }
  void Shutdown() override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->shut_down = true;
    }
    state_->End(absl::CancelledError("shut down"));
  }

 private:
  std::shared_ptr<LaneState> state_;
};

// Makes FakeLanes, or fails as the test says; remembers every lane it made.
class FakeLanes : public LaneKeeper::LaneFactory {
 public:
  struct DataPlaneAnswer {
    absl::Status status;  // OK: a data-plane lane.
    DataPlaneTrouble trouble = DataPlaneTrouble::kNone;
  };

  void AnswerDataPlane(DataPlaneAnswer answer) {
    absl::MutexLock lock(&mu_);
    data_plane_ = std::move(answer);
  }
  void AnswerGrpc(absl::Status status) {
    absl::MutexLock lock(&mu_);
    grpc_ = std::move(status);
  }

  absl::StatusOr<std::unique_ptr<PushPullLane>> DataPlane(const LaneKeeper::LaneSpot& spot,
                                                          ConnectAbort&,
                                                          DataPlaneTrouble* trouble) override {
    absl::MutexLock lock(&mu_);
    ++data_plane_calls_;
    *trouble = data_plane_.trouble;
    if (!data_plane_.status.ok()) return data_plane_.status;
    return MakeLocked(spot, /*tcp=*/true);
  }
  absl::StatusOr<std::unique_ptr<PushPullLane>> Grpc(const LaneKeeper::LaneSpot& spot) override {
    absl::MutexLock lock(&mu_);
    if (!grpc_.ok()) return grpc_;
    return MakeLocked(spot, /*tcp=*/false);
  }

  // The n-th lane made (0 first), once it is made; null (and a test failure) when it
  // is not made within kPatience.
  std::shared_ptr<LaneState> Lane(size_t n) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu_);
        if (lanes_.size() > n) return lanes_[n];
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "lane " << n << " was never made";
    return std::make_shared<LaneState>(SIZE_MAX, false);  // So the caller fails, not crashes.
  }
  size_t made() {
    absl::MutexLock lock(&mu_);
    return lanes_.size();
  }
  int data_plane_calls() {
    absl::MutexLock lock(&mu_);
    return data_plane_calls_;
  }

 private:
  std::unique_ptr<PushPullLane> MakeLocked(const LaneKeeper::LaneSpot& spot, bool tcp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto state = std::make_shared<LaneState>(spot.slot, tcp);
    lanes_.push_back(state);
    return std::make_unique<FakeLane>(state);
  }

  absl::Mutex mu_;
  DataPlaneAnswer data_plane_ ABSL_GUARDED_BY(mu_);
  absl::Status grpc_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<LaneState>> lanes_ ABSL_GUARDED_BY(mu_);
  int data_plane_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Records what the keeper tells its owner.
class RecordingOwner : public LaneKeeper::Owner {
 public:
  void OnUpdate(const std::string& lane, absl::Status decoded, ReceivedMessage&,
                PartitionValuesView& values) override {
    absl::MutexLock lock(&mu_);
    updates_.push_back(absl::StrCat(lane, ": ", values.partition_id, decoded.ok() ? "" : " bad"));
  }
  void Reconnected(const std::vector<uint32_t>& partitions) override {
    absl::MutexLock lock(&mu_);
    reconnected_.push_back(partitions);
  }
  void Failed(absl::Status status) override {
    absl::MutexLock lock(&mu_);
    failed_.push_back(std::move(status));
  }

  // Waits until `ready` holds of the owner; false after kPatience.
  bool WaitFor(const std::function<bool(const RecordingOwner&)>& ready) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu_);
        if (ready(*this)) return true;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }
  std::vector<std::string> updates() {
    absl::MutexLock lock(&mu_);
    return updates_;
  }
  std::vector<std::vector<uint32_t>> reconnected() {
    absl::MutexLock lock(&mu_);
    return reconnected_;
  }
  std::vector<absl::Status> failed() {
    absl::MutexLock lock(&mu_);
    return failed_;
  }

  // For WaitFor's predicates (called under mu_).
  size_t updates_seen() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return updates_.size(); }
  size_t reconnects_seen() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return reconnected_.size(); }
  size_t failures_seen() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return failed_.size(); }

 private:
  absl::Mutex mu_;
  std::vector<std::string> updates_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint32_t>> reconnected_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
};

PushHeader HeaderFor(uint32_t partition) {
  PushHeader header;
  header.job_id = "job";
  header.partition_id = partition;
  return header;
}

// Two shards: shard 0 owns partitions 0 and 1, shard 1 owns partition 2.
class LaneKeeperTest : public ::testing::Test {
 protected:
  LaneKeeperTest() {
    shards_.push_back({0, "ps-0:7000", nullptr, {0, 1}});
    shards_.push_back({1, "ps-1:7000", nullptr, {2}});
    options_.transport = PsTransport::kGrpc;
    options_.streams_per_shard = 1;
    options_.retry_budget = absl::Seconds(30);
    options_.first_data_plane_retry = absl::Milliseconds(20);
    options_.max_data_plane_retry = absl::Milliseconds(40);
  }

  // The keeper over lanes_ (which it then owns; lanes_ stays usable).
  std::unique_ptr<LaneKeeper> Keeper() {
    auto lanes = std::make_unique<FakeLanes>();
    lanes_ = lanes.get();
    return std::make_unique<LaneKeeper>(identity_, shards_, 3, options_, owner_, nullptr,
                                        std::move(lanes));
  }

  PsIdentity identity_;
  std::vector<LaneKeeper::ShardLink> shards_;
  LaneKeeper::Options options_;
  RecordingOwner owner_;
  FakeLanes* lanes_ = nullptr;
};

TEST_F(LaneKeeperTest, PushesGoOnTheirShardsLaneAndUpdatesReachTheOwner) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  ASSERT_EQ(lanes_->made(), 2u);
  EXPECT_TRUE(keeper->Write(1, HeaderFor(1), nullptr, 0));
  EXPECT_TRUE(keeper->Write(2, HeaderFor(2), nullptr, 0));
  EXPECT_TRUE(keeper->Write(0, HeaderFor(0), nullptr, 0));
  EXPECT_THAT(lanes_->Lane(0)->Written(), ElementsAre(1, 0));
  EXPECT_THAT(lanes_->Lane(1)->Written(), ElementsAre(2));
  // A partition no shard owns goes nowhere.
  EXPECT_FALSE(keeper->Carries(3));
  EXPECT_FALSE(keeper->Write(3, HeaderFor(3), nullptr, 0));

  lanes_->Lane(1)->Deliver(2);
  lanes_->Lane(0)->Deliver(0);
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.updates_seen() == 2; }));
  EXPECT_THAT(owner_.updates(), ::testing::UnorderedElementsAre("PS shard 1 at ps-1:7000: 2",
                                                                "PS shard 0 at ps-0:7000: 0"));
  EXPECT_EQ(keeper->tcp_lanes(), 0);
  keeper->Close();
  EXPECT_TRUE(owner_.failed().empty());
  EXPECT_TRUE(owner_.reconnected().empty());
}

TEST_F(LaneKeeperTest, SeveralLanesPerShardSharePartitionsInTurn) {
  options_.streams_per_shard = 2;
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  ASSERT_EQ(lanes_->made(), 4u);  // Two per shard; shard 1's second lane carries nothing.
  for (uint32_t p : {0u, 1u, 2u}) EXPECT_TRUE(keeper->Write(p, HeaderFor(p), nullptr, 0));
  EXPECT_THAT(lanes_->Lane(0)->Written(), ElementsAre(0));
  EXPECT_THAT(lanes_->Lane(1)->Written(), ElementsAre(1));
  EXPECT_THAT(lanes_->Lane(2)->Written(), ElementsAre(2));
  EXPECT_TRUE(lanes_->Lane(3)->Written().empty());
  lanes_->Lane(1)->Deliver(1);
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.updates_seen() == 1; }));
  EXPECT_THAT(owner_.updates(), ElementsAre("PS shard 0 at ps-0:7000 (stream 2 of 2): 1"));
}

TEST_F(LaneKeeperTest, ABrokenLaneIsReplacedAndItsPartitionsAskedForAgain) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  std::shared_ptr<LaneState> first = lanes_->Lane(0);
  first->End(absl::UnavailableError("connection reset"));
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.reconnects_seen() == 1; }));
  EXPECT_THAT(owner_.reconnected(), ElementsAre(ElementsAre(0, 1)));
  EXPECT_EQ(keeper->reconnects(), 1);
  std::shared_ptr<LaneState> second = lanes_->Lane(2);  // Lane 1 is shard 1's.
  EXPECT_EQ(second->slot, 0u);
  // The new lane carries the shard's pushes and updates; the old one gets nothing.
  EXPECT_TRUE(keeper->Write(1, HeaderFor(1), nullptr, 0));
  EXPECT_THAT(second->Written(), ElementsAre(1));
  second->Deliver(1);
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.updates_seen() == 1; }));
  EXPECT_TRUE(owner_.failed().empty());
  EXPECT_TRUE(first->Written().empty());
}

TEST_F(LaneKeeperTest, ARefusalFailsTheOwnerAndIsNotRetried) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  lanes_->Lane(1)->End(absl::FailedPreconditionError("shard 1 holds no job \"job\""));
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.failures_seen() == 1; }));
  EXPECT_THAT(owner_.failed()[0].message(), HasSubstr("holds no job"));
  EXPECT_EQ(owner_.failed()[0].code(), absl::StatusCode::kFailedPrecondition);
  keeper->Close();
  EXPECT_EQ(lanes_->made(), 2u);
  EXPECT_EQ(keeper->reconnects(), 0);
}

TEST_F(LaneKeeperTest, AShardUnreachablePastTheRetryBudgetFailsTheOwner) {
  options_.retry_budget = absl::Milliseconds(250);
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  lanes_->AnswerGrpc(absl::UnavailableError("connect: connection refused"));
  lanes_->Lane(0)->End(absl::UnavailableError("connection reset"));
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.failures_seen() == 1; }));
  const absl::Status failed = owner_.failed()[0];
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.message(), HasSubstr("PS shard 0 at ps-0:7000 unreachable for 250ms"));
  EXPECT_THAT(failed.message(), HasSubstr("connection refused"));
  EXPECT_TRUE(owner_.reconnected().empty());
}

TEST_F(LaneKeeperTest, AShardNotYetUpAtOpenIsConnectedByTheReader) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerGrpc(absl::UnavailableError("connect: connection refused"));
  ASSERT_TRUE(keeper->Open().ok());  // Unavailable is the reader's to retry.
  EXPECT_EQ(lanes_->made(), 0u);
  EXPECT_FALSE(keeper->Write(0, HeaderFor(0), nullptr, 0));  // No lane yet.
  lanes_->AnswerGrpc(absl::OkStatus());
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.reconnects_seen() == 2; }));
  EXPECT_TRUE(keeper->Write(0, HeaderFor(0), nullptr, 0));
}

TEST_F(LaneKeeperTest, AnotherOpenErrorIsReturned) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerGrpc(absl::InvalidArgumentError("PS shard 0 at ps-0:7000: no channel"));
  const absl::Status opened = keeper->Open();
  EXPECT_EQ(opened.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opened.message(), HasSubstr("no channel"));
}

TEST_F(LaneKeeperTest, AutoFallsBackToGrpcWhenTheDataPortFailsAndMovesBackWhenItAnswers) {
  options_.transport = PsTransport::kAuto;
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerDataPlane({absl::UnavailableError("data port 7001: connection refused"),
                           DataPlaneTrouble::kDataPort});
  ASSERT_TRUE(keeper->Open().ok());
  ASSERT_EQ(lanes_->made(), 2u);
  EXPECT_FALSE(lanes_->Lane(0)->tcp);
  EXPECT_EQ(keeper->tcp_lanes(), 0);
  // The prober (a round every 100 ms, a slot's retry after 20-40 ms here) tries again
  // and fails while the port fails.
  const int tried = lanes_->data_plane_calls();
  const absl::Time deadline = absl::Now() + kPatience;
  while (lanes_->data_plane_calls() < tried + 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(lanes_->data_plane_calls(), tried + 4) << "the prober never tried again";
  EXPECT_EQ(lanes_->made(), 2u);

  lanes_->AnswerDataPlane({absl::OkStatus(), DataPlaneTrouble::kNone});
  ASSERT_TRUE(owner_.WaitFor([](const RecordingOwner& o) { return o.reconnects_seen() == 2; }));
  EXPECT_EQ(keeper->tcp_lanes(), 2);
  EXPECT_TRUE(lanes_->Lane(0)->WasShutDown());  // The prober ended the gRPC streams.
  std::shared_ptr<LaneState> tcp = lanes_->Lane(2);
  EXPECT_TRUE(tcp->tcp);
  EXPECT_TRUE(keeper->Write(2, HeaderFor(2), nullptr, 0));
  EXPECT_TRUE(lanes_->Lane(3)->tcp);
  EXPECT_EQ(lanes_->Lane(2)->Written().size() + lanes_->Lane(3)->Written().size(), 1u);
  EXPECT_TRUE(owner_.failed().empty());
}

TEST_F(LaneKeeperTest, AutoStaysOnGrpcForAShardWithoutADataPlane) {
  options_.transport = PsTransport::kAuto;
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerDataPlane({absl::FailedPreconditionError("this shard runs no TCP data plane"),
                           DataPlaneTrouble::kNone});
  ASSERT_TRUE(keeper->Open().ok());
  const int tried = lanes_->data_plane_calls();
  EXPECT_EQ(tried, 2);
  absl::SleepFor(absl::Milliseconds(250));  // Long past a probe's 20 ms.
  EXPECT_EQ(lanes_->data_plane_calls(), tried);  // Not a trouble the prober retries.
  EXPECT_EQ(keeper->tcp_lanes(), 0);
}

TEST_F(LaneKeeperTest, AutoReturnsARefusalOfTheCaller) {
  options_.transport = PsTransport::kAuto;
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerDataPlane({absl::PermissionDeniedError("OpenDataPlane: bad node credential"),
                           DataPlaneTrouble::kRefused});
  const absl::Status opened = keeper->Open();
  EXPECT_EQ(opened.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(lanes_->made(), 0u);  // No gRPC lane in its place.
}

TEST_F(LaneKeeperTest, TcpOnlyReturnsTheDataPlanesError) {
  options_.transport = PsTransport::kTcp;
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  lanes_->AnswerDataPlane({absl::FailedPreconditionError("this shard runs no TCP data plane"),
                           DataPlaneTrouble::kNone});
  const absl::Status opened = keeper->Open();
  EXPECT_EQ(opened.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.message(), HasSubstr("no TCP data plane"));
  EXPECT_EQ(lanes_->made(), 0u);
}

// The network's lanes (no factory passed) for a shard whose address made no stub:
// every transport refuses at Open, naming the shard, and `auto` does not fall back.
TEST_F(LaneKeeperTest, TheNetworksLanesRefuseAShardWithoutAChannel) {
  for (PsTransport transport : {PsTransport::kAuto, PsTransport::kTcp, PsTransport::kGrpc}) {
    options_.transport = transport;
    LaneKeeper keeper(identity_, shards_, 3, options_, owner_, nullptr);
    const absl::Status opened = keeper.Open();
    EXPECT_EQ(opened.code(), absl::StatusCode::kInvalidArgument) << opened;
    EXPECT_THAT(opened.message(), HasSubstr("PS shard 0 at ps-0:7000: no channel"));
    EXPECT_EQ(keeper.tcp_lanes(), 0);
  }
}

TEST_F(LaneKeeperTest, CloseEndsReadersBlockedOnTheirLanes) {
  std::unique_ptr<LaneKeeper> keeper = Keeper();
  ASSERT_TRUE(keeper->Open().ok());
  keeper->Close();  // Returns only once both readers are joined.
  EXPECT_TRUE(lanes_->Lane(0)->WasShutDown());
  EXPECT_TRUE(lanes_->Lane(1)->WasShutDown());
  EXPECT_FALSE(keeper->Write(0, HeaderFor(0), nullptr, 0));
  keeper->Close();  // Idempotent.
  EXPECT_TRUE(owner_.failed().empty());
  EXPECT_TRUE(owner_.reconnected().empty());
}

}  // namespace
}  // namespace tributary::worker
