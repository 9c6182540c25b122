// Exponential backoff between retries: the first delay, doubled after each wait up to
// a ceiling. One definition for every retry loop (registration with the coordinator,
// PS calls, stream reconnects); the loops keep their own deadlines and conditions.
//
//   Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
//   while (!TryOnce()) absl::SleepFor(backoff.Next());
#ifndef TRIBUTARY_COMMON_BACKOFF_H_
#define TRIBUTARY_COMMON_BACKOFF_H_

#include <algorithm>

#include "absl/time/time.h"

namespace tributary {

class Backoff {
 public:
  Backoff(absl::Duration first, absl::Duration max)
      : first_(first), max_(std::max(first, max)), next_(first) {}

  // The delay to wait now; the following one doubles (up to the ceiling).
  absl::Duration Next() {
    const absl::Duration now = next_;
    next_ = std::min(next_ * 2, max_);
    return now;
  }
  // The delay Next() would return, without advancing.
  absl::Duration Peek() const { return next_; }
  // Back to the first delay (after a success).
  void Reset() { next_ = first_; }

 private:
  const absl::Duration first_;
  const absl::Duration max_;
  absl::Duration next_;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_BACKOFF_H_
