// `tributary local [job flags]`: a whole cluster on loopback (coordinator, PS shards
// and workers as processes of this machine, local_cluster.h), the job submitted to it
// (or an interrupted run in the same --run_dir continued), its progress followed to
// the end, then the summary, --params_out, --export and --summary_json.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/commands/commands.h"
#include "cli/job_progress.h"
#include "cli/local_cluster.h"
#include "cli/model_files.h"
#include "cli/parameters.h"
#include "cli/run_viewer.h"
#include "common/job_flags.h"
#include "common/job_spec.h"
#include "common/usable_cores.h"
#include "worker/engine/dataset.h"
#include "worker/engine/job_model.h"
#include "worker/engine/torchscript.h"

ABSL_FLAG(int, ps_shards, 2,
          "local: parameter server shards to start (processes on this machine), in [1, 4 x "
          "usable cores]. Default: 2.");
ABSL_DECLARE_FLAG(uint32_t, replicas);  // common/job_flags_mode.cc
ABSL_FLAG(int, workers, 2, "local: worker processes to start. Default: 2.");
ABSL_FLAG(bool, oversubscribe, false,
          "local: allow more replicas (--workers x --replicas) than the machine has cores. "
          "Default: false.");
ABSL_FLAG(int, nodes, 0,
          "local: node groups the workers are spread over (workers of one node reduce "
          "through Gloo and push once); 0 = one node per worker. Default: 0.");
ABSL_FLAG(std::string, devices, "cpu",
          "local: --devices of every worker (auto, cpu, gpu, gpu:0,1). Default: cpu.");
ABSL_FLAG(std::string, run_dir, "",
          "local: directory for logs, port files, state and checkpoints. Default: a new "
          "/tmp/tributary-local-XXXXXX.");
ABSL_FLAG(bool, fresh, false,
          "local: start a new job even when --run_dir holds an interrupted one with the same "
          "flags (which is stopped). Without it, tributary local run again in the run dir of "
          "an interrupted run continues that job. Default: false.");
ABSL_FLAG(std::string, bin_dir, "",
          "local: directory holding coordinator, parameter_server and worker. Default: "
          "empty (the Bazel runfiles of this binary).");
ABSL_FLAG(std::string, summary_json, "",
          "local: write the final summary (accuracy, loss, steps, throughput, bytes, the "
          "job spec) as JSON to this file. Default: empty (not written).");
ABSL_FLAG(std::string, params_out, "",
          "local: pull the final parameters from the PS into this file (flat float32) "
          "before stopping. Default: empty.");
ABSL_FLAG(std::string, export, "",
          "local: when the job completes, write the trained model (parameters and buffers) "
          "to this TorchScript file, as `tributary export` does. Default: empty.");
ABSL_FLAG(double, progress_interval, 0.5,
          "local: seconds between progress updates (0.05 to 3600; the job's end is noticed "
          "within 0.5 s whatever the interval). Without a terminal a line is printed every "
          "10 s or every interval, whichever is longer. Default: 0.5.");
ABSL_FLAG(std::vector<std::string>, coordinator_arg, {},
          "local: extra flags for the coordinator, comma separated.");
ABSL_FLAG(std::vector<std::string>, ps_arg, {},
          "local: extra flags for every PS shard, comma separated.");
ABSL_FLAG(std::vector<std::string>, worker_arg, {},
          "local: extra flags for every worker, comma separated.");

namespace tributary::cli {
namespace {

// The reason `tributary local` gives the job it stops on Ctrl-C: a later run in the
// same --run_dir recognizes it and resumes the job.
constexpr char kInterruptedReason[] = "tributary local interrupted";
// local: --progress_interval's bounds, and how often the job is asked whether it ended.
constexpr double kMinProgressInterval = 0.05;
constexpr double kMaxProgressInterval = 3600;
constexpr absl::Duration kJobPollInterval = absl::Milliseconds(500);
// Periodic checkpoints of `tributary local` when --checkpoint_interval is not given.
constexpr uint64_t kLocalCheckpointInterval = 500;
// `tributary local --ps_shards`: at most this many shard processes per usable core.
constexpr int kLocalShardsPerCore = 4;


// Paths the workers open must not depend on the directory they run in.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

// What a run does about the job an earlier run in its directory left: follow it (the
// coordinator restored it unfinished), or submit `spec` (which may resume it).
struct Continuation {
  std::optional<v1::Job> follow;
  v1::JobSpec spec;
};

// The same job, as far as continuing it goes: the spec but for where it starts.
// A job's stored spec holds the cut the coordinator chose for CUT_AUTO; the same flags
// ask for CUT_AUTO again, which a job resuming it resolves to that same cut.
bool SameJob(v1::JobSpec a, v1::JobSpec b) {
  for (v1::JobSpec* spec : {&a, &b}) {
    spec->clear_resume_from();
    spec->clear_init_from();
    *spec = WithDefaults(std::move(*spec));
  }
  if (a.partition_cut() == v1::CUT_AUTO || b.partition_cut() == v1::CUT_AUTO) {
    a.set_partition_cut(v1::CUT_AUTO);
    b.set_partition_cut(v1::CUT_AUTO);
  }
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// Whether `job`, or a job it resumed from (following resume_from among `jobs`), was
// started from `earlier`: a run given --resume=earlier continues this chain.
bool ResumesFrom(const v1::ListJobsResponse& jobs, const v1::Job& job, const std::string& earlier) {
  std::string from = job.spec().resume_from();
  for (int hops = 0; hops <= jobs.jobs_size() && !from.empty(); ++hops) {
    if (from == earlier) return true;
    const v1::Job* previous = nullptr;
    for (const v1::Job& candidate : jobs.jobs()) {
      if (candidate.job_id() == from) previous = &candidate;
    }
    if (previous == nullptr) return false;
    from = previous->spec().resume_from();
  }
  return false;
}

absl::StatusOr<Continuation> ContinueEarlierRun(CoordinatorClient& client,
                                                const v1::JobSpec& spec) {
  Continuation continuation;
  continuation.spec = spec;
  absl::StatusOr<v1::ListJobsResponse> listed = client.ListJobs();
  if (!listed.ok()) return listed.status();
  const v1::ListJobsResponse& jobs = *listed;
  if (jobs.jobs_size() == 0) return continuation;
  const v1::Job& last = jobs.jobs(0);  // Newest first.
  const bool same = SameJob(last.spec(), spec);
  const bool fresh = absl::GetFlag(FLAGS_fresh);
  if (!IsTerminal(last.state())) {
    // The run's launcher died (kill -9, a crash): the coordinator brought its job back.
    if (same && !fresh) {
      std::cout << "continuing job " << last.job_id() << " of the interrupted run in this "
                << "--run_dir (at step " << last.step() << "; the shards resume from their "
                << "last checkpoint)" << std::endl;
      continuation.follow = last;
      return continuation;
    }
    absl::StatusOr<v1::Job> stopped = client.ControlJob(
        CoordinatorClient::Control::kStop, last.job_id(),
        fresh ? "tributary local --fresh" : "a tributary local run with other flags");
    if (!stopped.ok()) return stopped.status();
    std::cout << "stopped job " << last.job_id() << " of the interrupted run in this --run_dir ("
              << (fresh ? "--fresh" : "its flags differ from these")
              << "); run it again with its own flags and --resume=" << last.job_id()
              << " to continue it" << std::endl;
    return continuation;
  }
  // Stopped by an interruption (Ctrl-C): a new job resumes it from its final
  // checkpoint, with the same flags. A --resume or --init_from the runs were given
  // is where the first of them started: the new job starts from the last one instead.
  const bool interrupted =
      last.state() == v1::STOPPED && absl::StrContains(last.state_reason(), kInterruptedReason);
  if (interrupted && same && !fresh &&
      (spec.resume_from().empty() || ResumesFrom(jobs, last, spec.resume_from()))) {
    std::cout << "resuming job " << last.job_id() << ", interrupted at step " << last.step()
              << ", from its checkpoint (--fresh to start over)" << std::endl;
    continuation.spec.clear_init_from();
    continuation.spec.set_resume_from(last.job_id());
  }
  return continuation;
}

// The job for this machine: paths made absolute (the workers must not depend on the
// directory they run in), and the data, the model and its starting point checked
// before any process starts, so that a missing directory or a model that does not fit
// the data is found here.
absl::Status PrepareSpec(v1::JobSpec& spec, const std::shared_ptr<const std::string>& model_file) {
  v1::DatasetSpec& dataset = *spec.mutable_dataset();
  dataset.set_directory(Absolute(dataset.directory()));
  dataset.set_train_path(Absolute(dataset.train_path()));
  dataset.set_test_path(Absolute(dataset.test_path()));
  dataset.set_train_labels_path(Absolute(dataset.train_labels_path()));
  dataset.set_test_labels_path(Absolute(dataset.test_labels_path()));
  if (model_file != nullptr && !engine::BuiltWithTorch()) {
    return absl::UnavailableError(absl::StrCat("--model_file: this build has ",
                                               engine::TorchDescription(),
                                               ", so its workers cannot run TorchScript models"));
  }
  spec.set_init_from(Absolute(spec.init_from()));
  if (spec.devices() == v1::GPU && absl::GetFlag(FLAGS_devices) == "cpu") {
    return absl::InvalidArgumentError(
        "--job_devices=gpu needs GPU workers, but --devices=cpu starts CPU-only ones: the job "
        "could never be placed (use --devices=auto or gpu:N, or --job_devices=auto)");
  }
  absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(dataset, spec.seed());
  if (!data.ok()) return data.status();
  if (model_file != nullptr) return CheckModelFlag(spec, model_file, &data->train);
  absl::StatusOr<engine::ModelDef> model = engine::BuildJobModel(spec.model(), nullptr, data->train);
  if (!model.ok()) return absl::InvalidArgumentError(model.status().message());
  if (!spec.init_from().empty()) {
    absl::StatusOr<std::vector<float>> initial = ReadParameters(spec.init_from());
    if (!initial.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--init_from: ", initial.status().message()));
    }
    if (initial->size() != model->num_parameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("--init_from=", spec.init_from(), ": ", initial->size(),
                       " float32 values, but the model has ", model->num_parameters,
                       " parameters"));
    }
  }
  return absl::OkStatus();
}

// The cluster to start (binaries, processes, their extra flags and the thread budget);
// the job's replicas and nodes follow it unless the flags say otherwise. *nodes: the
// node groups the workers form.
absl::StatusOr<LocalClusterOptions> ClusterOptions(const char* argv0, v1::JobSpec& spec,
                                                   ShutdownSignal& shutdown, int* nodes) {
  LocalClusterOptions options;
  if (absl::Status found = LocateBinaries(argv0, absl::GetFlag(FLAGS_bin_dir), options);
      !found.ok()) {
    return found;
  }
  options.ps_shards = absl::GetFlag(FLAGS_ps_shards);
  // Ctrl-C while the cluster starts stops the start (each process is waited for).
  options.start_cancelled = [&shutdown] { return shutdown.requested(); };
  options.workers = absl::GetFlag(FLAGS_workers);
  options.nodes = absl::GetFlag(FLAGS_nodes);
  options.devices = absl::GetFlag(FLAGS_devices);
  options.coordinator_args = absl::GetFlag(FLAGS_coordinator_arg);
  options.parameter_server_args = absl::GetFlag(FLAGS_ps_arg);
  options.worker_args = absl::GetFlag(FLAGS_worker_arg);
  if (options.ps_shards < 1 || options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ps_shards=", options.ps_shards,
                                                   " --workers=", options.workers,
                                                   ": both must be >= 1"));
  }
  // The thread budget: every worker runs on this machine, so its cores are shared out
  // among all their replicas (a worker alone would take them all). By default each core
  // gets one replica with one compute thread (measured best here: docs/performance.md);
  // more replicas than cores only when asked (--oversubscribe). GPU workers (--devices
  // other than cpu) get one replica per worker by default: a replica there is a GPU.
  const int cores = UsableCores();
  const int workers = options.workers;
  const bool cpu_workers = absl::GetFlag(FLAGS_devices) == "cpu";
  if (absl::GetFlag(FLAGS_replicas) == 0 && !FlagGiven("job_json")) {
    spec.set_replicas_per_worker(
        cpu_workers ? static_cast<uint32_t>(std::clamp(cores / workers, 1, 64)) : 1);
  }
  const int replicas = workers * static_cast<int>(std::max(1u, spec.replicas_per_worker()));
  if (cpu_workers && replicas > cores && !absl::GetFlag(FLAGS_oversubscribe)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers=", workers, " x --replicas=", spec.replicas_per_worker(), " = ", replicas,
        " replicas on this machine's ", cores,
        " cores: each would get less than a core. Use fewer, or pass --oversubscribe"));
  }
  const bool threads_given =
      std::any_of(options.worker_args.begin(), options.worker_args.end(),
                  [](const std::string& arg) { return absl::StartsWith(arg, "--cpu_threads"); });
  if (!threads_given) {
    options.worker_args.push_back(absl::StrCat("--cpu_threads=", std::max(1, cores / replicas)));
  }
  // Every shard is a process of its own with its threads, on this one machine.
  const int most_shards = std::min<int>(kMaxPsShards, kLocalShardsPerCore * cores);
  if (options.ps_shards > most_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_shards=", options.ps_shards, ": at most ", most_shards, " on this machine (",
        kLocalShardsPerCore, " per usable core, ", cores, " cores)"));
  }
  *nodes = options.nodes > 0 ? std::min(options.nodes, options.workers) : options.workers;
  // The job needs every node this cluster starts, unless the flags say otherwise.
  if (!FlagGiven("nodes_min") && spec.nodes_min() <= 1) {
    spec.set_nodes_min(*nodes);
    if (spec.nodes_max() < spec.nodes_min()) spec.set_nodes_max(*nodes);
  }
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (options.run_dir.empty()) {
    char pattern[] = "/tmp/tributary-local-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
    options.run_dir = pattern;
  }
  return options;
}

// Follows the job until it ends, the user interrupts (the job is stopped, exit 130) or
// a process of the cluster dies (exit 1), printing its progress: the job as last seen.
v1::Job FollowJob(CoordinatorClient& client, LocalCluster& cluster, v1::Job job,
                  ShutdownSignal& shutdown, int* exit_code) {
  const bool tty = isatty(STDOUT_FILENO);
  const absl::Duration interval = absl::Seconds(absl::GetFlag(FLAGS_progress_interval));
  // The job's end is seen within kJobPollInterval, whatever --progress_interval says:
  // the lines come at that interval, not the exit.
  const absl::Duration poll = std::min(interval, kJobPollInterval);
  absl::Time last_line = absl::InfinitePast(), next_update = absl::InfinitePast();
  const std::string job_id = job.job_id();
  while (true) {
    if (shutdown.WaitFor(poll)) {
      std::cout << (tty ? "\n" : "") << "interrupted: stopping the job and the cluster"
                << std::endl;
      absl::StatusOr<v1::Job> stopped = client.ControlJob(
          CoordinatorClient::Control::kStop, "", kInterruptedReason, absl::Seconds(5));
      if (stopped.ok()) job = *std::move(stopped);
      *exit_code = 130;
      return job;
    }
    if (absl::Status alive = cluster.CheckProcesses(); !alive.ok()) {
      std::cout << (tty ? "\n" : "");
      std::cerr << "tributary local: " << alive.message() << std::endl;
      *exit_code = 1;
      return job;
    }
    absl::StatusOr<v1::Job> current = client.GetJob(job_id);
    if (!current.ok()) continue;
    job = *std::move(current);
    const absl::Time now = absl::Now();
    if (now < next_update && !IsTerminal(job.state())) continue;
    next_update = now + interval;
    // The job's own clock (its start to now or its end), not when this loop first saw it
    // running: a short job may be far along by the first poll.
    const std::string line = ProgressLine(job, TrainingSeconds(job));
    if (tty) {
      std::cout << "\r\033[K" << line << std::flush;
    } else if (now - last_line >= std::max(interval, absl::Seconds(10)) ||
               IsTerminal(job.state())) {
      std::cout << line << std::endl;
      last_line = now;
    }
    if (IsTerminal(job.state())) {
      if (tty) std::cout << "\n";
      if (job.state() != v1::COMPLETED) {
        std::cerr << "job " << v1::JobState_Name(job.state()) << ": " << job.state_reason()
                  << std::endl;
        *exit_code = 1;
      }
      return job;
    }
  }
}

// After the job: --params_out and --export (of a completed job), the summary line and
// --summary_json. The exit code, made 1 when any of them failed.
int Report(CoordinatorClient& client, const v1::Job& job, absl::Time start, int exit_code) {
  Summary summary;
  summary.job = job;
  summary.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  summary.bytes_pushed = job.result().bytes_pushed();
  summary.bytes_pulled = job.result().bytes_pulled();
  if (!absl::GetFlag(FLAGS_params_out).empty() && job.state() == v1::COMPLETED) {
    absl::StatusOr<PulledParameters> params =
        PullParameters(client.channel(), client.channel_options());
    absl::Status written = params.ok()
                               ? WriteParameters(*params, absl::GetFlag(FLAGS_params_out))
                               : params.status();
    if (!written.ok()) {
      std::cerr << "tributary local: --params_out: " << written << std::endl;
      exit_code = 1;
    }
  }
  const std::string export_path = absl::GetFlag(FLAGS_export);
  if (!export_path.empty() && job.state() != v1::COMPLETED) {
    std::cerr << "tributary local: --export: not written, the job is "
              << v1::JobState_Name(job.state()) << std::endl;
  } else if (!export_path.empty()) {
    absl::StatusOr<ExportResult> exported =
        ExportModel(client.channel(), client.channel_options(), job.job_id(), export_path);
    if (exported.ok()) {
      std::cout << "exported " << exported->model << " (step " << exported->step << ") to "
                << export_path << std::endl;
    } else {
      std::cerr << "tributary local: --export: " << exported.status() << std::endl;
      exit_code = 1;
    }
  }
  // The summary first: the job is over, and stopping the processes takes a moment.
  if (job.state() == v1::COMPLETED) {
    const v1::JobResult& result = job.result();
    // Classifiers: the test accuracy; a model with its own loss: its test loss.
    const std::string evaluation =
        result.test_accuracy() >= 0 ? absl::StrFormat("test accuracy %.4f", result.test_accuracy())
                                    : absl::StrFormat("test loss %.4f", result.test_loss());
    std::cout << absl::StrFormat(
        "done: %llu steps in %.1fs, %s%s, final loss %.4f, "
        "%.0f samples/s, %.1f MB pushed, %.1f MB pulled\n",
        static_cast<unsigned long long>(job.step()), summary.wall_seconds, evaluation,
        MetricsText(result.metrics(), ", test "), result.final_loss(),
        result.samples_per_second(), summary.bytes_pushed / 1e6, summary.bytes_pulled / 1e6);
  }
  const std::string summary_path = absl::GetFlag(FLAGS_summary_json);
  if (!summary_path.empty()) {
    std::ofstream out(summary_path);
    out << SummaryJson(summary) << "\n";
    if (!out) {
      std::cerr << "tributary local: cannot write --summary_json " << summary_path << "\n";
      exit_code = exit_code == 0 ? 1 : exit_code;
    } else {
      std::cout << "summary: " << summary_path << "\n";
    }
  }
  std::cout << std::flush;
  return exit_code;
}

}  // namespace

int RunLocal(const char* argv0, ShutdownSignal& shutdown) {
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(&model_file);
  if (!spec.ok()) return Fail(spec.status());
  if (absl::Status prepared = PrepareSpec(*spec, model_file); !prepared.ok()) {
    return Fail(prepared);
  }
  // Periodic checkpoints unless asked otherwise, so an interrupted run can continue.
  if (!FlagGiven("checkpoint_interval") && !FlagGiven("job_json")) {
    spec->set_checkpoint_interval_steps(kLocalCheckpointInterval);
  }
  const double progress_interval = absl::GetFlag(FLAGS_progress_interval);
  if (!(progress_interval >= kMinProgressInterval && progress_interval <= kMaxProgressInterval)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--progress_interval=", progress_interval, ": must be from ",
                     kMinProgressInterval, " to ", kMaxProgressInterval, " seconds")));
  }
  int nodes = 0;
  absl::StatusOr<LocalClusterOptions> options = ClusterOptions(argv0, *spec, shutdown, &nodes);
  if (!options.ok()) return Fail(options.status());
  // One run per directory: its logs, state and checkpoints are this run's.
  absl::StatusOr<int> lock = LockRunDirectory(options->run_dir, absl::Seconds(15));
  if (!lock.ok()) return Fail(lock.status());

  const absl::Time start = absl::Now();
  std::cout << "tributary local: coordinator, " << options->ps_shards << " PS shard(s), "
            << options->workers << " worker(s) on " << nodes << " node(s), "
            << spec->replicas_per_worker() << " replica(s) each; logs in " << options->run_dir
            << std::endl;
  LocalCluster cluster(*options);
  if (absl::Status started = cluster.Start(); !started.ok()) {
    cluster.Stop();
    if (absl::IsCancelled(started)) {
      std::cout << "interrupted: " << started.message() << "; the cluster is stopped"
                << std::endl;
      return 130;
    }
    return Fail(started);
  }
  std::cout << "dashboard: " << cluster.dashboard_url() << "\n"
            << "coordinator: " << cluster.coordinator_address() << " (grpcurl -plaintext "
            << cluster.coordinator_address() << " list; control calls need -H "
            << "\"authorization: Bearer $(cat " << cluster.control_token_file() << ")\")"
            << std::endl;

  absl::StatusOr<CoordinatorClient> client =
      CoordinatorClient::OverChannel(cluster.coordinator_channel(), cluster.channel_options());
  // A run dir an earlier run was interrupted in: continue its job (or start over).
  absl::StatusOr<v1::Job> submitted = [&]() -> absl::StatusOr<v1::Job> {
    if (!client.ok()) return client.status();
    if (model_file != nullptr) {
      if (absl::Status uploaded = UploadModel(*client, *spec, *model_file); !uploaded.ok()) {
        return uploaded;
      }
    }
    absl::StatusOr<Continuation> continuation = ContinueEarlierRun(*client, *spec);
    if (!continuation.ok()) return continuation.status();
    if (continuation->follow.has_value()) return *continuation->follow;
    return client->Submit(continuation->spec);
  }();
  if (!submitted.ok()) {
    cluster.Stop();
    return Fail(submitted.status());
  }
  std::cout << "job " << submitted->job_id() << ": " << spec->model().name() << " on "
            << v1::DatasetFormat_Name(spec->dataset().format()) << ", batch "
            << spec->global_batch_size() << ", " << v1::TrainingMode_Name(spec->mode())
            << std::endl;
  int exit_code = 0;
  const v1::Job job = FollowJob(*client, cluster, *submitted, shutdown, &exit_code);
  exit_code = Report(*client, job, start, exit_code);
  cluster.Stop();
  std::cout << "its dashboard again: tributary show " << options->run_dir << std::endl;
  if (KeepDashboardRequested() && !shutdown.requested()) {
    absl::Status kept = KeepDashboard(options->run_dir, cluster.dashboard_port(), shutdown);
    if (!kept.ok()) std::cerr << "tributary local: --keep_dashboard: " << kept.message() << "\n";
  }
  return exit_code;
}

}  // namespace tributary::cli
