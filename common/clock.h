// An injectable time source. The coordinator's heartbeat timeouts, settle windows and
// rendezvous deadlines read it, so unit tests drive them with FakeClock instead of
// sleeping; any service core that keeps time should take one too.
#ifndef TRIBUTARY_COMMON_CLOCK_H_
#define TRIBUTARY_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tributary {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// Starts at a fixed instant and moves only when told to.
class FakeClock : public Clock {
 public:
  FakeClock() : now_(absl::FromUnixSeconds(1700000000)) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration by) {
    absl::MutexLock lock(&mu_);
    now_ += by;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CLOCK_H_
