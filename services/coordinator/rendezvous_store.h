// The rendezvous key-value store: one key space per rendezvous id (a node group in
// one generation). Node leaders publish their ncclUniqueId here and Gloo's
// rendezvous::Store runs on top of it. Waits are callbacks, not blocked threads, so
// many workers can wait at once; an overdue wait is answered by ExpireDeadlines().
#ifndef TRIBUTARY_SERVICES_COORDINATOR_RENDEZVOUS_STORE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tributary::coordinator {

struct RendezvousLimits {
  int64_t max_value_bytes = 1 << 20;            // Per value (an ncclUniqueId is 128 bytes).
  int64_t max_keys = 4096;                      // Per rendezvous id.
  absl::Duration max_wait = absl::Minutes(10);  // Longer timeouts are cut to this.
};

// Counters for /metrics; totals since start.
struct RendezvousStats {
  uint64_t waits_ok = 0;
  uint64_t waits_timed_out = 0;
  uint64_t waits_aborted = 0;    // Their rendezvous id expired while they waited.
  uint64_t waits_cancelled = 0;  // The caller went away.
  uint64_t waits_rejected = 0;   // Bad request or unknown id.
  uint64_t published = 0;
  uint64_t waiting = 0;  // Waits in progress now.
  uint64_t open_scopes = 0;
};

class RendezvousStore {
 public:
  // Called exactly once per Wait (unless Cancel returned true): OK with the values in
  // the order of the keys, or the error. Never called with the store's lock held.
  using WaitCallback = std::function<void(absl::Status, std::vector<std::string>)>;

  RendezvousStore(const Clock* clock, RendezvousLimits limits);

  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // Makes a rendezvous id usable. Opening an open id is a no-op.
  void Open(const std::string& rendezvous_id);

  // Expires an id with its generation: its values are dropped and its waiters get
  // ABORTED with `reason`; later calls for it get NOT_FOUND saying it expired.
  void Close(const std::string& rendezvous_id, const std::string& reason);

  // NOT_FOUND (unknown/expired id), INVALID_ARGUMENT (empty key, value over the limit,
  // too many keys), ALREADY_EXISTS (the key holds a different value).
  absl::Status Publish(const std::string& rendezvous_id, const std::string& key, std::string value);

  // Answers at once when every key is there (or on a bad request), else when the last
  // one is published, the id expires, or `timeout` passes (DEADLINE_EXCEEDED naming
  // the missing keys). A zero timeout never waits. Returns an id for Cancel, or 0 when
  // `done` already ran.
  uint64_t Wait(const std::string& rendezvous_id, const std::vector<std::string>& keys,
                absl::Duration timeout, WaitCallback done);

  // Drops a wait whose caller went away. True when its callback will never run.
  bool Cancel(uint64_t wait_id);

  // Answers every wait whose deadline has passed.
  void ExpireDeadlines();

  // Earliest deadline of a pending wait.
  std::optional<absl::Time> NextDeadline() const;

  // Blocks (in real time) until a wait with an earlier deadline than `until` arrives or
  // `until` passes; for the timer thread that calls ExpireDeadlines().
  void SleepUntilDeadlineOrChange(absl::Time until);
  // Wakes SleepUntilDeadlineOrChange, e.g. at shutdown.
  void Wake();

  RendezvousStats stats() const;
  bool IsOpen(const std::string& rendezvous_id) const;

 private:
  struct Waiter {
    std::string scope;
    std::vector<std::string> keys;  // As requested (answer order).
    size_t missing = 0;             // Distinct keys not yet published.
    absl::Time deadline;
    absl::Time started;
    WaitCallback done;
  };
  struct Scope {
    std::map<std::string, std::string> values;
    std::map<std::string, std::vector<uint64_t>> waiters_by_key;  // Missing key -> waits.
    std::set<uint64_t> waiters;
  };
  using Ready =
      std::vector<std::pair<WaitCallback, std::pair<absl::Status, std::vector<std::string>>>>;

  absl::Status UnknownScopeLocked(const std::string& rendezvous_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> ValuesLocked(const Scope& scope,
                                        const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a waiter from every index; returns its record.
  Waiter RemoveWaiterLocked(uint64_t wait_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunReady(Ready& ready);

  const Clock* clock_;
  const RendezvousLimits limits_;

  mutable absl::Mutex mu_;
  std::map<std::string, Scope> scopes_ ABSL_GUARDED_BY(mu_);
  // Recently expired ids -> why, so late callers learn what happened (bounded).
  std::map<std::string, std::string> expired_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> expired_order_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  uint64_t next_wait_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t deadline_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // Bumped when an earlier one appears.
  RendezvousStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_RENDEZVOUS_STORE_H_
