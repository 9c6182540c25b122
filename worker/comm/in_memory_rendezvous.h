// Test double: a RendezvousClient over one in-process map, shared by the threads
// that play the processes of a node group.
#ifndef TRIBUTARY_WORKER_COMM_IN_MEMORY_RENDEZVOUS_H_
#define TRIBUTARY_WORKER_COMM_IN_MEMORY_RENDEZVOUS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/rendezvous_client.h"

namespace tributary::worker {

class InMemoryRendezvous : public RendezvousClient {
 public:
  absl::Status Publish(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = values_.emplace(key, value);
    if (!inserted && it->second != value) {
      return absl::AlreadyExistsError(absl::StrCat("key ", key, " has another value"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto all_present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const std::string& key : keys) {
        if (!values_.count(key)) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
      std::vector<std::string> missing;
      for (const std::string& key : keys) {
        if (!values_.count(key)) missing.push_back(key);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("keys still missing: ", absl::StrJoin(missing, ", ")));
    }
    std::vector<std::string> result;
    for (const std::string& key : keys) result.push_back(values_.at(key));
    return result;
  }

  const std::string& rendezvous_id() const override { return id_; }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  const std::string id_ = "in-memory";
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_IN_MEMORY_RENDEZVOUS_H_
