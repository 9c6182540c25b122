#include "services/coordinator/coordinator_driver.h"

#include "absl/time/clock.h"
#include "common/thread_name.h"

namespace tributary::coordinator {
namespace {

// The control loop wakes at least this often: heartbeat timeouts and settle windows
// are noticed within it.
constexpr absl::Duration kControlPeriod = absl::Milliseconds(100);

}  // namespace

CoordinatorDriver::CoordinatorDriver(Coordinator* coordinator, std::function<void()> every_second)
    : coordinator_(coordinator), every_second_(std::move(every_second)) {}

CoordinatorDriver::~CoordinatorDriver() { Stop(); }

void CoordinatorDriver::Start() {
  control_ = std::thread([this] {
    NameThisThread("coord-control");
    ControlLoop();
  });
  shards_ = std::thread([this] {
    NameThisThread("coord-shards");
    ShardLoop();
  });
  timer_ = std::thread([this] {
    NameThisThread("coord-timer");
    TimerLoop();
  });
}

void CoordinatorDriver::Stop() {
  if (stopping_.exchange(true)) return;
  stop_.Notify();
  coordinator_->rendezvous().Wake();
  for (std::thread* thread : {&control_, &shards_, &timer_}) {
    if (thread->joinable()) thread->join();
  }
}

void CoordinatorDriver::ControlLoop() {
  absl::Time next_second = absl::Now();
  while (!stopping_) {
    coordinator_->Tick();
    if (every_second_ && absl::Now() >= next_second) {
      every_second_();
      next_second = absl::Now() + absl::Seconds(1);
    }
    coordinator_->WaitForWork(kControlPeriod);
  }
}

void CoordinatorDriver::ShardLoop() {
  while (!stopping_) {
    coordinator_->PollShards();
    if (stop_.WaitForNotificationWithTimeout(coordinator_->options().shard_poll_interval)) return;
  }
}

void CoordinatorDriver::TimerLoop() {
  RendezvousStore& store = coordinator_->rendezvous();
  while (!stopping_) {
    store.ExpireDeadlines();
    const std::optional<absl::Time> next = store.NextDeadline();
    store.SleepUntilDeadlineOrChange(next.value_or(absl::Now() + absl::Seconds(1)));
  }
}

}  // namespace tributary::coordinator
