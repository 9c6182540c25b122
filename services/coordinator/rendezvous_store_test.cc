// The rendezvous KV: publish/wait across threads, timeouts naming the missing keys,
// the value size limit, scope isolation, expiry with the generation and cancellation.
#include "services/coordinator/rendezvous_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace tributary::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Answer {
  absl::Notification done;
  absl::Status status;
  std::vector<std::string> values;

  RendezvousStore::WaitCallback Callback() {
    return [this](absl::Status s, std::vector<std::string> v) {
      EXPECT_FALSE(done.HasBeenNotified()) << "callback ran twice";
      status = std::move(s);
      values = std::move(v);
      done.Notify();
    };
  }
};

class RendezvousStoreTest : public ::testing::Test {
 protected:
  RendezvousStoreTest() : store_(&clock_, Limits()) {}
  static RendezvousLimits Limits() {
    RendezvousLimits limits;
    limits.max_value_bytes = 128;
    limits.max_keys = 4;
    return limits;
  }
  FakeClock clock_;
  RendezvousStore store_;
};

TEST_F(RendezvousStoreTest, WaitAnsweredAtOnceWhenKeysExist) {
  store_.Open("g1/a");
  ASSERT_TRUE(store_.Publish("g1/a", "nccl_id", "abc").ok());
  ASSERT_TRUE(store_.Publish("g1/a", "other", "xyz").ok());
  Answer answer;
  EXPECT_EQ(store_.Wait("g1/a", {"other", "nccl_id"}, absl::Seconds(1), answer.Callback()), 0u);
  ASSERT_TRUE(answer.done.HasBeenNotified());
  EXPECT_TRUE(answer.status.ok()) << answer.status;
  EXPECT_THAT(answer.values, ElementsAre("xyz", "abc"));
}

TEST_F(RendezvousStoreTest, WaitersAcrossThreadsWakeOnPublish) {
  store_.Open("g1/a");
  constexpr int kWaiters = 8;
  std::vector<Answer> answers(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      store_.Wait("g1/a", {"rank0", "rank1"}, absl::Minutes(1), answers[i].Callback());
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(store_.stats().waiting, static_cast<uint64_t>(kWaiters));
  std::thread publisher0([&] { ASSERT_TRUE(store_.Publish("g1/a", "rank0", "A").ok()); });
  publisher0.join();
  for (Answer& answer : answers) EXPECT_FALSE(answer.done.HasBeenNotified());
  std::thread publisher1([&] { ASSERT_TRUE(store_.Publish("g1/a", "rank1", "B").ok()); });
  publisher1.join();
  for (Answer& answer : answers) {
    ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(answer.status.ok()) << answer.status;
    EXPECT_THAT(answer.values, ElementsAre("A", "B"));
  }
  EXPECT_EQ(store_.stats().waiting, 0u);
  EXPECT_EQ(store_.stats().waits_ok, static_cast<uint64_t>(kWaiters));
}

TEST_F(RendezvousStoreTest, TimeoutNamesMissingKeys) {
  store_.Open("g1/a");
  ASSERT_TRUE(store_.Publish("g1/a", "rank0", "A").ok());
  Answer answer;
  EXPECT_NE(
      store_.Wait("g1/a", {"rank0", "rank1", "rank2"}, absl::Milliseconds(500), answer.Callback()),
      0u);
  clock_.Advance(absl::Milliseconds(499));
  store_.ExpireDeadlines();
  EXPECT_FALSE(answer.done.HasBeenNotified());
  clock_.Advance(absl::Milliseconds(1));
  store_.ExpireDeadlines();
  ASSERT_TRUE(answer.done.HasBeenNotified());
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(answer.status.message(), HasSubstr("rank1, rank2"));
  EXPECT_THAT(answer.status.message(), ::testing::Not(HasSubstr("rank0")));
  EXPECT_THAT(answer.status.message(), HasSubstr("g1/a"));
}

TEST_F(RendezvousStoreTest, ZeroTimeoutNeverWaits) {
  store_.Open("g1/a");
  Answer answer;
  EXPECT_EQ(store_.Wait("g1/a", {"k"}, absl::ZeroDuration(), answer.Callback()), 0u);
  ASSERT_TRUE(answer.done.HasBeenNotified());
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(answer.status.message(), HasSubstr("k"));
}

TEST_F(RendezvousStoreTest, NextDeadlineIsTheEarliest) {
  store_.Open("g1/a");
  Answer late;
  Answer early;
  store_.Wait("g1/a", {"k"}, absl::Seconds(5), late.Callback());
  store_.Wait("g1/a", {"k"}, absl::Seconds(2), early.Callback());
  ASSERT_TRUE(store_.NextDeadline().has_value());
  EXPECT_EQ(*store_.NextDeadline(), clock_.Now() + absl::Seconds(2));
  clock_.Advance(absl::Seconds(2));
  store_.ExpireDeadlines();
  EXPECT_TRUE(early.done.HasBeenNotified());
  EXPECT_FALSE(late.done.HasBeenNotified());
  EXPECT_EQ(*store_.NextDeadline(), clock_.Now() + absl::Seconds(3));
}

TEST_F(RendezvousStoreTest, ValueSizeLimit) {
  store_.Open("g1/a");
  EXPECT_TRUE(store_.Publish("g1/a", "fits", std::string(128, 'x')).ok());
  const absl::Status big = store_.Publish("g1/a", "big", std::string(129, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("129 bytes"));
  EXPECT_THAT(big.message(), HasSubstr("--rendezvous_max_value_bytes=128"));
}

TEST_F(RendezvousStoreTest, KeyCountLimitAndEmptyKey) {
  store_.Open("g1/a");
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(store_.Publish("g1/a", "k" + std::to_string(i), "v").ok());
  }
  EXPECT_EQ(store_.Publish("g1/a", "k4", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Publish("g1/a", "", "v").code(), absl::StatusCode::kInvalidArgument);
  Answer no_keys;
  store_.Wait("g1/a", {}, absl::Seconds(1), no_keys.Callback());
  EXPECT_EQ(no_keys.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RendezvousStoreTest, KeysWrittenOnce) {
  store_.Open("g1/a");
  ASSERT_TRUE(store_.Publish("g1/a", "k", "one").ok());
  EXPECT_TRUE(store_.Publish("g1/a", "k", "one").ok()) << "same value again is OK";
  const absl::Status other = store_.Publish("g1/a", "k", "two");
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.message(), HasSubstr("'k'"));
}

TEST_F(RendezvousStoreTest, ScopesAreIsolated) {
  store_.Open("g1/a");
  store_.Open("g1/b");
  ASSERT_TRUE(store_.Publish("g1/a", "nccl_id", "from-a").ok());
  Answer in_b;
  store_.Wait("g1/b", {"nccl_id"}, absl::Seconds(1), in_b.Callback());
  EXPECT_FALSE(in_b.done.HasBeenNotified()) << "a key of g1/a must not satisfy g1/b";
  ASSERT_TRUE(store_.Publish("g1/b", "nccl_id", "from-b").ok());
  ASSERT_TRUE(in_b.done.HasBeenNotified());
  EXPECT_THAT(in_b.values, ElementsAre("from-b"));
}

TEST_F(RendezvousStoreTest, UnknownIdIsNotFound) {
  EXPECT_EQ(store_.Publish("nope", "k", "v").code(), absl::StatusCode::kNotFound);
  Answer answer;
  store_.Wait("nope", {"k"}, absl::Seconds(1), answer.Callback());
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(answer.status.message(), HasSubstr("unknown rendezvous id 'nope'"));
}

TEST_F(RendezvousStoreTest, ExpiryAbortsWaitersAndForgetsValues) {
  store_.Open("g1/a");
  ASSERT_TRUE(store_.Publish("g1/a", "rank0", "A").ok());
  Answer waiting;
  store_.Wait("g1/a", {"rank1"}, absl::Minutes(1), waiting.Callback());
  store_.Close("g1/a", "generation 1 ended: worker w2 lost");
  ASSERT_TRUE(waiting.done.HasBeenNotified());
  EXPECT_EQ(waiting.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting.status.message(), HasSubstr("worker w2 lost"));
  const absl::Status late = store_.Publish("g1/a", "rank1", "B");
  EXPECT_EQ(late.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(late.message(), HasSubstr("expired"));
  EXPECT_FALSE(store_.IsOpen("g1/a"));
  EXPECT_EQ(store_.stats().waits_aborted, 1u);
}

TEST_F(RendezvousStoreTest, CancelledWaitNeverAnswers) {
  store_.Open("g1/a");
  Answer answer;
  const uint64_t id = store_.Wait("g1/a", {"k"}, absl::Seconds(1), answer.Callback());
  ASSERT_NE(id, 0u);
  EXPECT_TRUE(store_.Cancel(id));
  EXPECT_FALSE(store_.Cancel(id));
  ASSERT_TRUE(store_.Publish("g1/a", "k", "v").ok());
  clock_.Advance(absl::Seconds(2));
  store_.ExpireDeadlines();
  EXPECT_FALSE(answer.done.HasBeenNotified());
  EXPECT_EQ(store_.stats().waiting, 0u);
}

TEST_F(RendezvousStoreTest, DuplicateKeysInOneWait) {
  store_.Open("g1/a");
  Answer answer;
  store_.Wait("g1/a", {"k", "k"}, absl::Seconds(1), answer.Callback());
  ASSERT_TRUE(store_.Publish("g1/a", "k", "v").ok());
  ASSERT_TRUE(answer.done.HasBeenNotified());
  EXPECT_THAT(answer.values, ElementsAre("v", "v"));
}

TEST_F(RendezvousStoreTest, TimerSleepWakesForEarlierDeadline) {
  RealClock real;
  RendezvousStore store(&real, Limits());
  store.Open("g");
  Answer answer;
  std::thread timer([&] {
    // Would sleep an hour unless the new, earlier deadline wakes it.
    store.SleepUntilDeadlineOrChange(absl::Now() + absl::Hours(1));
    while (!answer.done.HasBeenNotified()) {
      store.ExpireDeadlines();
      const auto next = store.NextDeadline();
      store.SleepUntilDeadlineOrChange(next.value_or(absl::Now() + absl::Seconds(1)));
    }
  });
  store.Wait("g", {"k"}, absl::Milliseconds(20), answer.Callback());
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kDeadlineExceeded);
  timer.join();
}

}  // namespace
}  // namespace tributary::coordinator
