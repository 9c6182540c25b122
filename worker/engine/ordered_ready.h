// Reports pieces that finish in any order (on several threads) in one fixed order:
// the replica contract (replica.h) reports gradients in strictly decreasing offset
// order, each report meaning "everything from here on is final", so a piece computed
// early on another thread waits to be reported until every piece before it in that
// order is done. Thread-safe; `report` runs under the reporter's lock, one call at a
// time, in order.
//
//   OrderedReady ready(pieces, [&](int piece) { on_ready(...piece...); });
//   runner.Run(pieces, [&](int t) { Compute(order[t]); ready.Done(t); });
#ifndef TRIBUTARY_WORKER_ENGINE_ORDERED_READY_H_
#define TRIBUTARY_WORKER_ENGINE_ORDERED_READY_H_

#include <functional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tributary::engine {

class OrderedReady {
 public:
  // Positions 0 .. count-1 are reported in that order; report(position) says so.
  OrderedReady(int count, std::function<void(int)> report)
      : done_(static_cast<size_t>(count), 0), report_(std::move(report)) {}

  // Position `position` is done: reports it and every done position after it, as far
  // as they go without a gap. Each position is reported once.
  void Done(int position) {
    absl::MutexLock lock(&mu_);
    if (position < 0 || position >= static_cast<int>(done_.size())) return;
    done_[position] = 1;
    while (next_ < static_cast<int>(done_.size()) && done_[next_]) {
      if (report_) report_(next_);
      ++next_;
    }
  }

  // How many positions were reported.
  int reported() const {
    absl::MutexLock lock(&mu_);
    return next_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<char> done_ ABSL_GUARDED_BY(mu_);
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  const std::function<void(int)> report_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_ORDERED_READY_H_
