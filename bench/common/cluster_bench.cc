#include "bench/common/cluster_bench.h"

#include <glog/logging.h>

#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_json.h"
#include "bench/common/work_dir.h"
#include "common/job_flags.h"
#include "common/process.h"

ABSL_FLAG(int, ps_shards, 2, "Cluster: PS shards (tributary local --ps_shards). Default: 2.");
ABSL_FLAG(std::vector<std::string>, tributary_arg, {},
          "Cluster: further flags for tributary local, comma separated (e.g. "
          "--worker_arg=--cpu_threads=1). Default: none.");
ABSL_FLAG(std::string, work_dir, "",
          "Directory for the job spec and every process's log. Default: a new "
          "/tmp/tributary-<benchmark>-XXXXXX.");

namespace tributary::bench {

absl::StatusOr<ClusterBench> SetUpClusterBench(const char* argv0, const std::string& bench,
                                               const std::function<void(v1::JobSpec&)>& adjust) {
  absl::StatusOr<BenchRunfiles> runfiles = BenchRunfiles::Create(argv0);
  if (!runfiles.ok()) return runfiles.status();
  absl::StatusOr<std::string> tributary = runfiles->Find("tributary/cli/tributary");
  if (!tributary.ok()) return tributary.status();
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags();
  if (!spec.ok()) return spec.status();
  if (adjust) adjust(*spec);
  absl::StatusOr<std::string> work_dir = WorkDirFromFlags(bench);
  if (!work_dir.ok()) return work_dir.status();
  const std::string job_json = *work_dir + "/job.json";
  if (absl::Status written = WriteJobJson(*spec, job_json); !written.ok()) return written;
  ClusterBench setup{*std::move(runfiles), *std::move(tributary), *std::move(spec),
                     *std::move(work_dir), job_json, DescribeMachine()};
  std::printf("%s: %s\n", bench.c_str(), MachineLine(setup.machine).c_str());
  std::printf("job: %s\n", JobSpecJson(setup.spec).c_str());
  std::printf("logs: %s\n", setup.work_dir.c_str());
  std::fflush(stdout);
  return setup;
}

absl::StatusOr<std::string> WorkDirFromFlags(const std::string& bench) {
  return MakeWorkDir(absl::GetFlag(FLAGS_work_dir), bench);
}

void ApplyClusterFlags(const std::string& tributary, const std::string& job_json,
                       const std::string& run_dir, TributaryLocalOptions& options) {
  options.binary = tributary;
  options.job_json = job_json;
  options.run_dir = run_dir;
  options.ps_shards = absl::GetFlag(FLAGS_ps_shards);
  options.extra_args = absl::GetFlag(FLAGS_tributary_arg);
}

int BenchFail(const char* bench, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", bench, status.ToString().c_str());
  return 1;
}

int BenchMain(int argc, char** argv, const char* usage, int (*run)(const char* argv0)) {
  RememberGivenFlags(argc, argv);
  InitProcess(argc, argv, usage);
  FLAGS_minloglevel = 1;
  return run(argv[0]);
}

}  // namespace tributary::bench
