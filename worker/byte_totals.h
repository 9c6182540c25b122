// Turns the byte counts of successive TrainingSessions (each PS client counts from
// zero) into totals since the worker started: what GetStatus and the Prometheus
// counters report; a new generation must not make them fall. Heartbeats report the
// current session's count instead (session()): the coordinator adds up a job's own
// traffic from those, generation by generation.
#ifndef TRIBUTARY_WORKER_BYTE_TOTALS_H_
#define TRIBUTARY_WORKER_BYTE_TOTALS_H_

#include <atomic>
#include <cstdint>

namespace tributary::worker {

class ByteTotals {
 public:
  // The following counts come from a new session, which starts again at zero.
  void BeginSession() { session_seen_ = 0; }

  // The current session's count so far; any thread.
  uint64_t session() const { return session_seen_; }

  // Records the current session's cumulative count; returns what it adds to the total
  // (0 when it did not grow). Called by one thread (the training loop).
  uint64_t Update(uint64_t session_count) {
    if (session_count <= session_seen_) return 0;
    const uint64_t added = session_count - session_seen_;
    session_seen_ = session_count;
    total_ += added;
    return added;
  }

  // Since the worker started; any thread.
  uint64_t total() const { return total_; }

 private:
  std::atomic<uint64_t> session_seen_{0};
  std::atomic<uint64_t> total_{0};
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_BYTE_TOTALS_H_
