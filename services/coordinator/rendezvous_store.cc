#include "services/coordinator/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tributary::coordinator {
namespace {

constexpr size_t kExpiredRemembered = 4096;
constexpr size_t kKeysNamedInErrors = 8;

std::string KeyList(const std::vector<std::string>& keys) {
  std::vector<std::string> shown(keys.begin(),
                                 keys.begin() + std::min(keys.size(), kKeysNamedInErrors));
  std::string list = absl::StrJoin(shown, ", ");
  if (keys.size() > shown.size()) {
    absl::StrAppend(&list, " and ", keys.size() - shown.size(), " more");
  }
  return list;
}

}  // namespace

RendezvousStore::RendezvousStore(const Clock* clock, RendezvousLimits limits)
    : clock_(clock), limits_(limits) {}

void RendezvousStore::Open(const std::string& rendezvous_id) {
  absl::MutexLock lock(&mu_);
  scopes_.try_emplace(rendezvous_id);
  expired_.erase(rendezvous_id);
}

void RendezvousStore::Close(const std::string& rendezvous_id, const std::string& reason) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    auto scope = scopes_.find(rendezvous_id);
    if (scope == scopes_.end()) return;
    const std::set<uint64_t> waiting = scope->second.waiters;
    for (uint64_t wait_id : waiting) {
      Waiter waiter = RemoveWaiterLocked(wait_id);
      ++stats_.waits_aborted;
      ready.push_back({std::move(waiter.done),
                       {absl::AbortedError(absl::StrCat("rendezvous id '", rendezvous_id,
                                                        "' expired while waiting: ", reason)),
                        {}}});
    }
    scopes_.erase(scope);
    expired_[rendezvous_id] = reason;
    expired_order_.push_back(rendezvous_id);
    while (expired_order_.size() > kExpiredRemembered) {
      expired_.erase(expired_order_.front());
      expired_order_.pop_front();
    }
  }
  RunReady(ready);
}

absl::Status RendezvousStore::UnknownScopeLocked(const std::string& rendezvous_id) const {
  auto expired = expired_.find(rendezvous_id);
  if (expired != expired_.end()) {
    return absl::NotFoundError(
        absl::StrCat("rendezvous id '", rendezvous_id, "' expired: ", expired->second));
  }
  return absl::NotFoundError(
      absl::StrCat("unknown rendezvous id '", rendezvous_id,
                   "' (ids come with an assignment and live as long as its generation)"));
}

absl::Status RendezvousStore::Publish(const std::string& rendezvous_id, const std::string& key,
                                      std::string value) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty key published under rendezvous id '", rendezvous_id, "'"));
  }
  if (static_cast<int64_t>(value.size()) > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value of key '", key, "' under rendezvous id '", rendezvous_id, "' is ", value.size(),
        " bytes; the limit is --rendezvous_max_value_bytes=", limits_.max_value_bytes));
  }
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    auto found = scopes_.find(rendezvous_id);
    if (found == scopes_.end()) return UnknownScopeLocked(rendezvous_id);
    Scope& scope = found->second;
    auto existing = scope.values.find(key);
    if (existing != scope.values.end()) {
      if (existing->second == value) return absl::OkStatus();
      return absl::AlreadyExistsError(
          absl::StrCat("key '", key, "' under rendezvous id '", rendezvous_id,
                       "' already holds a different value (", existing->second.size(),
                       " bytes); keys are written once per rendezvous id"));
    }
    if (static_cast<int64_t>(scope.values.size()) >= limits_.max_keys) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous id '", rendezvous_id, "' already holds ", scope.values.size(),
                       " keys; the limit is --rendezvous_max_keys=", limits_.max_keys, " (key '",
                       key, "' refused)"));
    }
    scope.values.emplace(key, std::move(value));
    ++stats_.published;
    auto waiting = scope.waiters_by_key.find(key);
    if (waiting != scope.waiters_by_key.end()) {
      const std::vector<uint64_t> wait_ids = std::move(waiting->second);
      scope.waiters_by_key.erase(waiting);
      for (uint64_t wait_id : wait_ids) {
        auto waiter = waiters_.find(wait_id);
        if (waiter == waiters_.end() || --waiter->second.missing > 0) continue;
        std::vector<std::string> values = ValuesLocked(scope, waiter->second.keys);
        Waiter done = RemoveWaiterLocked(wait_id);
        ++stats_.waits_ok;
        ready.push_back({std::move(done.done), {absl::OkStatus(), std::move(values)}});
      }
    }
  }
  RunReady(ready);
  return absl::OkStatus();
}

std::vector<std::string> RendezvousStore::ValuesLocked(const Scope& scope,
                                                       const std::vector<std::string>& keys) const {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(scope.values.at(key));
  return values;
}

uint64_t RendezvousStore::Wait(const std::string& rendezvous_id,
                               const std::vector<std::string>& keys, absl::Duration timeout,
                               WaitCallback done) {
  absl::Status rejected;
  std::vector<std::string> values;
  bool answered_now = false;
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    if (keys.empty()) {
      rejected = absl::InvalidArgumentError(
          absl::StrCat("wait under rendezvous id '", rendezvous_id, "' lists no keys"));
    } else if (std::find(keys.begin(), keys.end(), std::string()) != keys.end()) {
      rejected = absl::InvalidArgumentError(
          absl::StrCat("wait under rendezvous id '", rendezvous_id, "' lists an empty key"));
    }
    auto found = scopes_.find(rendezvous_id);
    if (rejected.ok() && found == scopes_.end()) rejected = UnknownScopeLocked(rendezvous_id);
    if (!rejected.ok()) {
      ++stats_.waits_rejected;
    } else {
      Scope& scope = found->second;
      std::set<std::string> missing;
      for (const std::string& key : keys) {
        if (scope.values.count(key) == 0) missing.insert(key);
      }
      if (missing.empty()) {
        values = ValuesLocked(scope, keys);
        ++stats_.waits_ok;
        answered_now = true;
      } else if (timeout <= absl::ZeroDuration()) {
        ++stats_.waits_timed_out;
        answered_now = true;
        answer = absl::DeadlineExceededError(
            absl::StrCat("rendezvous id '", rendezvous_id, "': keys missing (timeout 0): ",
                         KeyList(std::vector<std::string>(missing.begin(), missing.end()))));
      } else {
        const uint64_t wait_id = next_wait_id_++;
        const absl::Time now = clock_->Now();
        Waiter waiter;
        waiter.scope = rendezvous_id;
        waiter.keys = keys;
        waiter.missing = missing.size();
        waiter.started = now;
        waiter.deadline = now + std::min(timeout, limits_.max_wait);
        waiter.done = std::move(done);
        for (const std::string& key : missing) scope.waiters_by_key[key].push_back(wait_id);
        scope.waiters.insert(wait_id);
        if (deadlines_.empty() || waiter.deadline < deadlines_.begin()->first) {
          ++deadline_epoch_;
        }
        deadlines_.insert({waiter.deadline, wait_id});
        waiters_.emplace(wait_id, std::move(waiter));
        stats_.waiting = waiters_.size();
        return wait_id;
      }
    }
  }
  if (!rejected.ok()) {
    done(rejected, {});
  } else if (answered_now) {
    done(answer, std::move(values));
  }
  return 0;
}

RendezvousStore::Waiter RendezvousStore::RemoveWaiterLocked(uint64_t wait_id) {
  auto found = waiters_.find(wait_id);
  Waiter waiter = std::move(found->second);
  waiters_.erase(found);
  deadlines_.erase({waiter.deadline, wait_id});
  auto scope = scopes_.find(waiter.scope);
  if (scope != scopes_.end()) {
    scope->second.waiters.erase(wait_id);
    for (const std::string& key : waiter.keys) {
      auto by_key = scope->second.waiters_by_key.find(key);
      if (by_key == scope->second.waiters_by_key.end()) continue;
      std::vector<uint64_t>& ids = by_key->second;
      ids.erase(std::remove(ids.begin(), ids.end(), wait_id), ids.end());
      if (ids.empty()) scope->second.waiters_by_key.erase(by_key);
    }
  }
  stats_.waiting = waiters_.size();
  return waiter;
}

bool RendezvousStore::Cancel(uint64_t wait_id) {
  absl::MutexLock lock(&mu_);
  if (waiters_.count(wait_id) == 0) return false;
  RemoveWaiterLocked(wait_id);
  ++stats_.waits_cancelled;
  return true;
}

void RendezvousStore::ExpireDeadlines() {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const uint64_t wait_id = deadlines_.begin()->second;
      Waiter waiter = RemoveWaiterLocked(wait_id);
      std::vector<std::string> missing;
      auto scope = scopes_.find(waiter.scope);
      for (const std::string& key : waiter.keys) {
        if (scope == scopes_.end() || scope->second.values.count(key) == 0) {
          if (std::find(missing.begin(), missing.end(), key) == missing.end()) {
            missing.push_back(key);
          }
        }
      }
      ++stats_.waits_timed_out;
      ready.push_back(
          {std::move(waiter.done),
           {absl::DeadlineExceededError(absl::StrCat(
                "rendezvous id '", waiter.scope, "': keys still missing after ",
                absl::FormatDuration(waiter.deadline - waiter.started), ": ", KeyList(missing))),
            {}}});
    }
  }
  RunReady(ready);
}

std::optional<absl::Time> RendezvousStore::NextDeadline() const {
  absl::MutexLock lock(&mu_);
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void RendezvousStore::SleepUntilDeadlineOrChange(absl::Time until) {
  absl::MutexLock lock(&mu_);
  const uint64_t epoch = deadline_epoch_;
  if (!deadlines_.empty() && deadlines_.begin()->first < until) {
    until = deadlines_.begin()->first;
  }
  const auto changed = [this, epoch]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return deadline_epoch_ != epoch; };
  // The deadlines are in the store's clock; the timer thread runs only with the real
  // clock, where the two agree.
  mu_.AwaitWithDeadline(absl::Condition(&changed), until);
}

void RendezvousStore::Wake() {
  absl::MutexLock lock(&mu_);
  ++deadline_epoch_;
}

RendezvousStats RendezvousStore::stats() const {
  absl::MutexLock lock(&mu_);
  RendezvousStats stats = stats_;
  stats.open_scopes = scopes_.size();
  return stats;
}

bool RendezvousStore::IsOpen(const std::string& rendezvous_id) const {
  absl::MutexLock lock(&mu_);
  return scopes_.count(rendezvous_id) > 0;
}

void RendezvousStore::RunReady(Ready& ready) {
  for (auto& [done, result] : ready) done(std::move(result.first), std::move(result.second));
}

}  // namespace tributary::coordinator
