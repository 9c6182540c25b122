#include "tests/coordinator/coordinator_harness.h"

#include <grpcpp/create_channel.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tributary::testing {
namespace {

// The port file is one line of JSON: {"grpc_port":N,"http_port":N,"pid":N}.
int Field(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return 0;
  size_t end = at + key.size();
  while (end < json.size() && (isdigit(json[end]) || json[end] == '-')) ++end;
  int value = 0;
  return absl::SimpleAtoi(json.substr(at + key.size(), end - at - key.size()), &value) ? value : 0;
}

}  // namespace


std::string RunningCoordinator::address() const { return absl::StrCat("127.0.0.1:", grpc_port); }

std::string RunningCoordinator::Log() const { return ReadAll(log_path); }

absl::StatusOr<int> RunningCoordinator::Stop(int signal) {
  stub.reset();
  if (process == nullptr) return absl::FailedPreconditionError("no coordinator process");
  process->Signal(signal);
  if (!process->Wait(absl::Seconds(30))) {
    return absl::DeadlineExceededError(
        absl::StrCat("the coordinator still runs 30 s after signal ", signal));
  }
  return process->exit_signal() != 0 ? 128 + process->exit_signal() : process->exit_code();
}

absl::StatusOr<RunningCoordinator> StartCoordinator(const std::vector<std::string>& flags,
                                                    const std::string& name) {
  RunningCoordinator running;
  const std::string port_file = TempPath(name + ".ports");
  running.log_path = TempPath(name + ".log");
  std::vector<std::string> argv = {RunfilePath("services/coordinator/coordinator"),
                                   "--listen=127.0.0.1:0", "--http_port=0", "--drain_seconds=0",
                                   "--port_file=" + port_file};
  // These tests drive the coordinator as a worker or a shard would, without a cluster
  // credential (tests/security covers the credential).
  argv.push_back("--allow_unauthenticated");
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start("coordinator", argv, running.log_path);
  if (!process.ok()) return process.status();
  running.process = *std::move(process);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (true) {
    const std::string ports = ReadAll(port_file);
    running.grpc_port = Field(ports, "grpc_port");
    running.http_port = Field(ports, "http_port");
    if (running.grpc_port > 0 && running.http_port > 0) break;
    if (!running.process->Running()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the coordinator ", running.process->ExitDescription(),
                       " before serving:\n", running.Log()));
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("the coordinator wrote no port file:\n", running.Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  running.stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(running.address(), grpc::InsecureChannelCredentials()));
  return running;
}

}  // namespace tributary::testing
