// What the benchmarks that run the local cluster share (time_to_accuracy, vs_ddp,
// scaling, step_breakdown): the flags --ps_shards, --tributary_arg and --work_dir, the
// set-up (the tributary binary, the job spec from the job flags written as JSON into
// the work directory, the header lines), and main.
#ifndef TRIBUTARY_BENCH_COMMON_CLUSTER_BENCH_H_
#define TRIBUTARY_BENCH_COMMON_CLUSTER_BENCH_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/common/bench_runfiles.h"
#include "bench/common/machine.h"
#include "bench/common/tributary_local_run.h"
#include "proto/job.pb.h"

namespace tributary::bench {

struct ClusterBench {
  BenchRunfiles runfiles;  // For the other programs the benchmark runs.
  std::string tributary;   // //cli:tributary.
  v1::JobSpec spec;        // From the job flags.
  std::string work_dir;    // --work_dir, or a new /tmp/tributary-<bench>-XXXXXX.
  std::string job_json;    // The spec, written there.
  MachineInfo machine;     // Before the runs.
};

// Finds //cli:tributary in the runfiles, reads the job flags (then `adjust`s the spec,
// when given), makes the work directory, writes the spec there as job.json, and prints
// "<bench>: <machine>", "job: <spec>" and "logs: <dir>".
absl::StatusOr<ClusterBench> SetUpClusterBench(
    const char* argv0, const std::string& bench,
    const std::function<void(v1::JobSpec&)>& adjust = nullptr);

// --work_dir, or a new /tmp/tributary-<bench>-XXXXXX.
absl::StatusOr<std::string> WorkDirFromFlags(const std::string& bench);

// Sets the options' binary, job JSON and run directory, and ps_shards and extra_args
// from --ps_shards and --tributary_arg.
void ApplyClusterFlags(const std::string& tributary, const std::string& job_json,
                       const std::string& run_dir, TributaryLocalOptions& options);

// Prints "<bench>: <status>" on stderr; returns the exit code 1.
int BenchFail(const char* bench, const absl::Status& status);

// A benchmark's main: remembers the flags given, parses them (with `usage`), quiets
// the logs below WARNING and returns run(argv[0]).
int BenchMain(int argc, char** argv, const char* usage, int (*run)(const char* argv0));

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_CLUSTER_BENCH_H_
