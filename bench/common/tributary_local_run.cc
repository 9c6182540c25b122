#include "bench/common/tributary_local_run.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/common/bench_json.h"
#include "bench/common/cpu_reading.h"
#include "bench/common/cpu_window.h"
#include "common/channel.h"
#include "common/job_spec.h"
#include "common/child_process.h"
#include "common/data_plane_wire.h"
#include "common/cluster_auth.h"
#include "common/testing/prometheus_text.h"
#include "common/tls.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary::bench {
namespace {

constexpr int kLogTailLines = 30;

absl::Time FromProto(const google::protobuf::Timestamp& time) {
  return absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
}

std::unique_ptr<grpc::ClientContext> Deadline(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

// A port ("grpc_port", "http_port") from the coordinator's port file, once the
// coordinator has written it.
std::optional<int> CoordinatorPort(const std::string& run_dir, const char* which = "grpc_port") {
  absl::StatusOr<std::string> text = ReadFileToString(run_dir + "/coordinator.ports.json");
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<google::protobuf::Struct> ports = ParseJsonObject(*text, "coordinator port file");
  if (!ports.ok()) return std::nullopt;  // Being written.
  absl::StatusOr<double> port = JsonNumber(*ports, which, "coordinator port file");
  if (!port.ok() || *port <= 0) return std::nullopt;
  return static_cast<int>(*port);
}

// A process's /metrics, parsed; nullopt when it did not answer.
std::optional<testing::ParsedMetrics> ScrapeMetrics(const std::string& host, int http_port) {
  httplib::Client http(host, http_port);
  http.set_connection_timeout(0, 300000);
  http.set_read_timeout(1, 0);
  auto response = http.Get("/metrics");
  if (!response || response->status != 200) return std::nullopt;
  absl::StatusOr<testing::ParsedMetrics> metrics = testing::ParsePrometheusText(response->body);
  if (!metrics.ok()) return std::nullopt;
  return *std::move(metrics);
}

// One worker's histogram sums, as last scraped (they only grow).
StepTimes WorkerTimes(const testing::ParsedMetrics& metrics) {
  StepTimes times;
  times.workers = 1;
  times.steps = static_cast<uint64_t>(metrics.Sum("tributary_worker_step_seconds_count"));
  times.step_seconds = metrics.Sum("tributary_worker_step_seconds_sum");
  times.push_wait_seconds = metrics.Sum("tributary_worker_push_wait_seconds_sum");
  times.reduce_seconds = metrics.Sum("tributary_worker_reduce_seconds_sum");
  times.parameters_wait_seconds = metrics.Sum("tributary_worker_parameters_wait_seconds_sum");
  times.forward_seconds = metrics.Sum("tributary_worker_forward_seconds_sum");
  times.backward_seconds = metrics.Sum("tributary_worker_backward_seconds_sum");
  times.copy_seconds = metrics.Sum("tributary_worker_copy_seconds_sum");
  times.push_seconds = metrics.Sum("tributary_worker_push_seconds_sum");
  return times;
}

bool Terminal(v1::JobState state) {
  return state == v1::COMPLETED || state == v1::FAILED || state == v1::STOPPED;
}

// The job record as the benchmark last saw it, turned into the run's timings and
// accuracy curve. Training starts when the job first went RUNNING (every worker past
// its data loading and rendezvous) and ends when it COMPLETED.
absl::Status FillFromJob(const v1::Job& job, absl::Time launch, TrainingRun& run) {
  std::optional<absl::Time> running;
  for (const v1::JobEvent& event : job.events()) {
    if (event.to_state() == v1::RUNNING) {
      running = FromProto(event.time());
      break;
    }
  }
  if (!running.has_value()) {
    return absl::UnavailableError(absl::StrCat("job ", job.job_id(), " never went RUNNING (",
                                               v1::JobState_Name(job.state()), ": ",
                                               job.state_reason(), ")"));
  }
  if (job.state() != v1::COMPLETED || !job.has_finished()) {
    return absl::UnavailableError(
        absl::StrCat("the last record of job ", job.job_id(), " the benchmark read was ",
                     v1::JobState_Name(job.state()), " at step ", job.step(), " of ",
                     job.total_steps(), ": the coordinator went away before its end was seen"));
  }
  run.setup_seconds = absl::ToDoubleSeconds(*running - launch);
  run.training_seconds = absl::ToDoubleSeconds(FromProto(job.finished()) - *running);
  // Rank 0's accuracy reaches the record with the next progress point after its
  // evaluation; a new value is a new evaluation.
  float last = -1;
  for (const v1::ProgressPoint& point : job.progress()) {
    if (point.test_accuracy() >= 0 && point.test_accuracy() != last) {
      run.evaluations.push_back({point.step(), point.test_accuracy(),
                                 absl::ToDoubleSeconds(FromProto(point.time()) - *running)});
      last = point.test_accuracy();
    }
  }
  // The last evaluation follows the last step, when no step is left to carry it.
  if (job.result().test_accuracy() >= 0 &&
      (run.evaluations.empty() || run.evaluations.back().step < job.step())) {
    run.evaluations.push_back({job.step(), job.result().test_accuracy(), run.training_seconds});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainingRun> RunTributaryLocal(const TributaryLocalOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(options.run_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create run directory ", options.run_dir, ": ", error.message()));
  }
  const std::string summary_path = options.run_dir + "/summary.json";
  std::remove(summary_path.c_str());
  std::remove((options.run_dir + "/coordinator.ports.json").c_str());
  std::vector<std::string> argv = {
      options.binary,
      "local",
      "--job_json=" + options.job_json,
      absl::StrCat("--workers=", options.workers),
      absl::StrCat("--ps_shards=", options.ps_shards),
      absl::StrCat("--nodes=", options.nodes),
      "--run_dir=" + options.run_dir,
      "--summary_json=" + summary_path,
      // The CLI notices the end after this benchmark does, so the last job record is
      // read before the CLI stops the cluster.
      "--progress_interval=1",
      absl::StrCat("--coordinator_arg=--heartbeat_interval=",
                   absl::FormatDuration(options.heartbeat_interval)),
  };
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());

  TrainingRun run;
  run.name = options.name;
  run.log_path = options.run_dir + "/tributary_local.log";
  std::remove(run.log_path.c_str());
  const absl::Time launch = absl::Now();
  absl::StatusOr<std::unique_ptr<ChildProcess>> started =
      ChildProcess::Start("tributary local", argv, run.log_path);
  if (!started.ok()) return started.status();
  ChildProcess& child = **started;

  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::optional<v1::Job> job;
  std::map<std::string, StepTimes> worker_times;  // By worker id.
  std::map<uint32_t, double> shard_apply;          // By shard index.
  std::map<uint32_t, double> shard_slowest;        // By shard index.
  absl::Time next_job_poll = launch, next_metrics_poll = launch;
  bool scraped_at_end = false;
  // account_cpu: the first complete reading once every worker stepped, and the latest.
  std::optional<CpuSnapshot> first_cpu, last_cpu;
  while (child.Running()) {
    const absl::Time now = absl::Now();
    if (stub == nullptr) {
      if (std::optional<int> port = CoordinatorPort(options.run_dir)) {
        // As the operator, with the secret tributary local made (ListWorkers needs it).
        absl::StatusOr<ChannelOptions> channel_options =
            ChannelOptionsFromTokenFile(options.run_dir + "/cluster.token", Role::kOperator);
        absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
            MakeChannel(absl::StrCat("127.0.0.1:", *port),
                        channel_options.value_or(ChannelOptions()));
        if (channel.ok()) stub = v1::Coordinator::NewStub(*channel);
      }
    }
    if (stub != nullptr && now >= next_job_poll && !(job.has_value() && Terminal(job->state()))) {
      next_job_poll = now + options.job_poll_interval;
      v1::Job current;
      if (stub->GetJob(Deadline(absl::Seconds(2)).get(), v1::GetJobRequest(), &current).ok() &&
          !current.job_id().empty()) {
        job = std::move(current);
      }
    }
    // While the job runs, and once more when it has completed (the workers wait for
    // the coordinator's stop before they exit).
    const bool scrape = job.has_value() && (job->state() == v1::RUNNING ||
                                            (job->state() == v1::COMPLETED && !scraped_at_end));
    if (stub != nullptr && scrape && (now >= next_metrics_poll || Terminal(job->state()))) {
      next_metrics_poll = now + options.metrics_poll_interval;
      scraped_at_end = Terminal(job->state());
      // account_cpu: this reading of every process (complete or not, judged below).
      std::optional<CpuSnapshot> cpu;
      if (options.account_cpu) {
        cpu.emplace();
        cpu->machine = ReadMachineTicks();
        cpu->at = absl::Now();
      }
      bool every_worker_stepped = true;
      v1::ListWorkersResponse workers;
      if (stub->ListWorkers(Deadline(absl::Seconds(2)).get(), v1::ListWorkersRequest(), &workers)
              .ok()) {
        for (const v1::WorkerInfo& worker : workers.workers()) {
          if (worker.http_port() == 0) continue;
          if (std::optional<testing::ParsedMetrics> metrics =
                  ScrapeMetrics(worker.host().empty() ? "127.0.0.1" : worker.host(),
                                static_cast<int>(worker.http_port()))) {
            worker_times[worker.worker_id()] = WorkerTimes(*metrics);
            if (cpu.has_value()) AddProcess("worker", *metrics, *cpu);
            every_worker_stepped &= metrics->Sum("tributary_worker_step_seconds_count") > 0;
          }
        }
      }
      v1::ClusterStatus status;
      if (options.scrape_shards &&
          stub->GetClusterStatus(Deadline(absl::Seconds(2)).get(), v1::GetClusterStatusRequest(),
                                 &status)
              .ok()) {
        for (const v1::ShardSummary& shard : status.shards()) {
          absl::StatusOr<std::string> host = data_plane::HostOf(shard.shard().address());
          if (shard.shard().http_port() == 0 || !host.ok()) continue;
          if (std::optional<testing::ParsedMetrics> metrics =
                  ScrapeMetrics(*host, static_cast<int>(shard.shard().http_port()))) {
            shard_apply[shard.shard().shard_index()] =
                metrics->Sum("tributary_ps_optimizer_apply_seconds_sum");
            shard_slowest[shard.shard().shard_index()] =
                metrics->Sum("tributary_ps_slowest_wait_seconds_total", "partition=\"0\"");
            if (cpu.has_value()) AddProcess("shard", *metrics, *cpu);
          }
        }
      }
      if (cpu.has_value() && job->state() == v1::RUNNING) {
        if (std::optional<int> port = CoordinatorPort(options.run_dir, "http_port")) {
          if (std::optional<testing::ParsedMetrics> metrics = ScrapeMetrics("127.0.0.1", *port)) {
            AddProcess("coordinator", *metrics, *cpu);
          }
        }
        // Complete: every worker and shard of the run, and the coordinator, answered.
        const auto count = [&](const char* kind) {
          const auto found = cpu->processes.find(kind);
          return found == cpu->processes.end() ? 0 : found->second;
        };
        if (every_worker_stepped && count("worker") == options.workers &&
            count("shard") == options.ps_shards && count("coordinator") == 1) {
          (first_cpu.has_value() ? last_cpu : first_cpu) = std::move(*cpu);
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  run.process_seconds = absl::ToDoubleSeconds(absl::Now() - launch);

  const auto failed = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat("tributary local (", child.ExitDescription(),
                                               "): ", why, "; last lines of ", run.log_path, ":\n",
                                               child.LogTail(kLogTailLines)));
  };
  if (child.exit_code() != 0) return failed("it failed");
  if (!job.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("tributary local: the benchmark never read the job "
                     "from the coordinator; see ",
                     run.log_path));
  }
  if (absl::Status filled = FillFromJob(*job, launch, run); !filled.ok()) {
    return failed(std::string(filled.message()));
  }
  for (const auto& [id, times] : worker_times) {
    run.step_times.workers += times.workers;
    run.step_times.steps += times.steps;
    run.step_times.step_seconds += times.step_seconds;
    run.step_times.push_wait_seconds += times.push_wait_seconds;
    run.step_times.reduce_seconds += times.reduce_seconds;
    run.step_times.parameters_wait_seconds += times.parameters_wait_seconds;
    run.step_times.forward_seconds += times.forward_seconds;
    run.step_times.backward_seconds += times.backward_seconds;
    run.step_times.copy_seconds += times.copy_seconds;
    run.step_times.push_seconds += times.push_seconds;
  }
  if (!shard_apply.empty() && static_cast<int>(shard_apply.size()) == options.ps_shards) {
    run.step_times.ps_apply_seconds = 0;
    for (const auto& [index, seconds] : shard_apply) run.step_times.ps_apply_seconds += seconds;
    run.step_times.slowest_wait_seconds = 0;
    for (const auto& [index, seconds] : shard_slowest) {
      run.step_times.slowest_wait_seconds += seconds;
    }
  }
  run.step_times.job_steps = job->step();
  if (first_cpu.has_value() && last_cpu.has_value()) {
    absl::StatusOr<CpuUse> cpu =
        CpuBetween(*first_cpu, *last_cpu, std::max(1u, std::thread::hardware_concurrency()));
    if (cpu.ok()) run.cpu = *std::move(cpu);
  }

  absl::StatusOr<std::string> text = ReadFileToString(summary_path);
  if (!text.ok()) return failed(std::string(text.status().message()));
  const std::string what = "tributary local summary " + summary_path;
  absl::StatusOr<google::protobuf::Struct> summary = ParseJsonObject(*text, what);
  if (!summary.ok()) return summary.status();
  absl::StatusOr<std::string> state = JsonString(*summary, "state", what);
  if (!state.ok()) return state.status();
  if (*state != "COMPLETED") return failed(absl::StrCat("the job ended ", *state));
  double accuracy = 0, loss = 0, steps = 0, reported = 0, pushed = 0, pulled = 0, batch = 0;
  const absl::Status read =
      JsonNumbers(*summary,
                  {JsonField{"test_accuracy", &accuracy}, JsonField{"final_loss", &loss},
                   JsonField{"steps", &steps}, JsonField{"samples_per_second", &reported},
                   JsonField{"bytes_pushed", &pushed}, JsonField{"bytes_pulled", &pulled},
                   JsonField{"job_spec.global_batch_size", &batch}},
                  what);
  if (!read.ok()) return read;
  run.test_accuracy = accuracy;
  run.final_loss = loss;
  run.steps = static_cast<uint64_t>(steps);
  run.samples = run.steps * static_cast<uint64_t>(batch);
  run.reported_samples_per_second = reported;
  run.bytes_pushed = static_cast<uint64_t>(pushed);
  run.bytes_pulled = static_cast<uint64_t>(pulled);
  if (job->spec().partition_cut() != v1::CUT_AUTO) {
    run.partition_cut = v1::PartitionCut_Name(job->spec().partition_cut());
  }
  return run;
}

absl::StatusOr<TrainingRun> RunLocalSgdVariant(const TributaryLocalOptions& options,
                                               const v1::JobSpec& spec, uint32_t sync_every,
                                               const std::string& work_dir,
                                               v1::JobSpec* local_sgd_spec) {
  v1::JobSpec job = spec;
  job.set_mode(v1::LOCAL_SGD);
  job.set_sync_every(sync_every);
  job = WithDefaults(std::move(job));
  if (absl::Status valid = ValidateJobSpec(job); !valid.ok()) return valid;
  TributaryLocalOptions variant = options;
  variant.job_json = work_dir + "/job-local-sgd.json";
  if (absl::Status written = WriteJobJson(job, variant.job_json); !written.ok()) return written;
  variant.run_dir = work_dir + "/tributary-local-sgd";
  variant.name = absl::StrCat("local SGD H=", job.sync_every());
  *local_sgd_spec = job;
  return RunTributaryLocal(variant);
}

}  // namespace tributary::bench
