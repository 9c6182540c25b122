// Helpers of the end-to-end tests that drive the real `tributary local` binary: start
// it in a run directory under TEST_TMPDIR, wait for it, read its summary, reach its
// coordinator as the operator, and check that none of its children outlives it.
#ifndef TRIBUTARY_TESTS_E2E_LOCAL_RUN_H_
#define TRIBUTARY_TESTS_E2E_LOCAL_RUN_H_

#include <google/protobuf/struct.pb.h>
#include <grpcpp/channel.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/child_process.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary::testing {

// `tributary local` with its run directory (<dir>/cluster), summary and log under
// TEST_TMPDIR/name.
struct LocalRun {
  std::string dir;
  std::string summary;
  std::unique_ptr<ChildProcess> process;
};

// Starts `tributary local` with `job_flags` in TEST_TMPDIR/name/cluster. `attempt`
// suffixes the summary and log files, so a second run in the same run directory
// keeps the first one's.
LocalRun StartLocal(const std::string& name, std::vector<std::string> job_flags,
                    const std::string& attempt = "");

// Waits for the launcher to exit; its exit code, or -1 (with its log) when it did not.
int WaitForExit(LocalRun& run, absl::Duration timeout);

google::protobuf::Struct ReadJson(const std::string& path);
double Number(const google::protobuf::Struct& json, const std::string& key);

// The pids the cluster's children wrote into their port files.
std::vector<pid_t> ChildPids(const std::string& cluster_dir);
// True while `pid` is a live process running one of our binaries.
bool StillOurs(pid_t pid, const std::string& cluster_dir);
// Every child of the cluster is gone within `timeout`; names the ones that are not.
void ExpectNoChildLeft(const std::string& cluster_dir, const std::vector<pid_t>& pids,
                       absl::Duration timeout);

// The run's coordinator, as the operator (the secret `tributary local` made).
std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& cluster_dir,
                                                  absl::Duration timeout);
// Polls the active job until `done` holds; the last job seen either way.
v1::Job WaitForJob(v1::Coordinator::Stub& stub, const std::function<bool(const v1::Job&)>& done,
                   absl::Duration timeout);
bool AnyState(const v1::Job&);
// pause, resume or stop the active job.
grpc::Status Control(v1::Coordinator::Stub& stub, const std::string& verb);

// A synthetic job long enough to be controlled while it runs.
std::vector<std::string> LongSyntheticJob();

}  // namespace tributary::testing

#endif  // TRIBUTARY_TESTS_E2E_LOCAL_RUN_H_
