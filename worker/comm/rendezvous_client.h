// The worker's view of its node group's rendezvous key-value store: publish a key
// once, wait for keys. Backed by the coordinator's PublishRendezvous /
// WaitRendezvous, scoped by the rendezvous id of the worker's assignment. Gloo's
// store and the NCCL unique-id exchange are built on it.
#ifndef TRIBUTARY_WORKER_COMM_RENDEZVOUS_CLIENT_H_
#define TRIBUTARY_WORKER_COMM_RENDEZVOUS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tributary::worker {

class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;

  // Writes key once; the same value again is OK, another value ALREADY_EXISTS.
  virtual absl::Status Publish(const std::string& key, const std::string& value) = 0;

  // The values of every key, in order, once all exist; DEADLINE_EXCEEDED naming the
  // missing keys after `timeout`; ABORTED when the generation ends meanwhile.
  virtual absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                        absl::Duration timeout) = 0;

  virtual const std::string& rendezvous_id() const = 0;
};

// Over the Coordinator service reachable through `channel`.
std::unique_ptr<RendezvousClient> MakeCoordinatorRendezvousClient(
    std::shared_ptr<grpc::Channel> channel, std::string rendezvous_id);

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_COMM_RENDEZVOUS_CLIENT_H_
