// gloo::rendezvous::Store over the coordinator's rendezvous KV, so that the worker
// processes of one node build their Gloo context without a shared file system or
// Redis: every key is scoped by the node group's rendezvous id (and a prefix per
// context), and expires with the generation.
#ifndef TRIBUTARY_WORKER_COMM_GLOO_STORE_H_
#define TRIBUTARY_WORKER_COMM_GLOO_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "worker/comm/rendezvous_client.h"

namespace tributary::worker {

// Gloo's Store reports failure by throwing: errors of the KV become
// gloo::IoException with the KV's message (the reducer turns them into statuses).
class KvGlooStore : public gloo::rendezvous::Store {
 public:
  // `client` must outlive the store. Keys are written as prefix + "/" + key.
  KvGlooStore(RendezvousClient& client, std::string prefix,
              std::chrono::milliseconds default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists (up to the default timeout), as Gloo expects.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string Scoped(const std::string& key) const;

  RendezvousClient& client_;
  const std::string prefix_;
  const std::chrono::milliseconds default_timeout_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_GLOO_STORE_H_
