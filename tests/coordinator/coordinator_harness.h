// Starts the real coordinator binary for multi-process tests and connects to it.
#ifndef TRIBUTARY_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_
#define TRIBUTARY_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.grpc.pb.h"
#include "common/child_process.h"
#include "tests/coordinator/command.h"

namespace tributary::testing {

struct RunningCoordinator {
  std::unique_ptr<ChildProcess> process;
  int grpc_port = 0;
  int http_port = 0;
  std::string log_path;
  std::unique_ptr<v1::Coordinator::Stub> stub;

  std::string address() const;
  // Sends `signal` and waits up to 30 s for the exit; the exit code (or 128 + the
  // signal that ended it). Closes this test's channel first: gRPC's server shutdown
  // waits for open client connections up to its deadline, which would slow every test
  // by seconds.
  absl::StatusOr<int> Stop(int signal);
  std::string Log() const;  // Its stdout/stderr so far.
};

// Starts //services/coordinator:coordinator on loopback with free ports plus `flags`
// and waits for its port file. `name` keeps the logs of several runs apart.
absl::StatusOr<RunningCoordinator> StartCoordinator(const std::vector<std::string>& flags,
                                                    const std::string& name);

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_
