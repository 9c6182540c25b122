// Over 600 lines on purpose: the subcommands share their flags and helpers here, and
// each is a short function; the cluster launcher itself is local_cluster.cc.
// tributary: the command-line front end.
//   tributary local  [job flags]  a whole cluster on loopback, trains, prints a summary
//   tributary submit [job flags]  submits a job to a running coordinator
//   tributary export --out=FILE   the trained model as a TorchScript file
//   tributary status | pause | resume | stop | pull   conveniences over the gRPC API
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/client_context.h>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/job_flags.h"
#include "cli/local_cluster.h"
#include "cli/model_files.h"
#include "cli/parameters.h"
#include "cli/run_viewer.h"
#include "common/channel.h"
#include "common/cluster_auth.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "common/process.h"
#include "common/shutdown.h"
#include "common/usable_cores.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/engine/dataset.h"
#include "worker/engine/job_model.h"
#include "worker/engine/torchscript.h"

// --- Where the cluster is ---
ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051",
          "submit/status/pause/resume/stop/pull: coordinator address host:port. "
          "Default: 127.0.0.1:50051.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the coordinator's control token (sent as 'authorization: Bearer "
          "<token>' on submit/pause/resume/stop). Default: empty (none).");
ABSL_FLAG(std::string, role, "operator",
          "auth-header: the role whose credential to print: operator, worker, "
          "parameter_server or coordinator (the last three to call a service by hand as "
          "that component would). Default: operator.");
ABSL_FLAG(std::string, reason, "", "pause/resume/stop: reason kept in the job's event log.");
ABSL_FLAG(std::string, job_id, "",
          "pause/resume/stop/status/export: job id; empty = the active job (export: the "
          "active or else the latest one).");
ABSL_FLAG(bool, json, false, "status: print ClusterStatus as JSON instead of a summary.");
ABSL_FLAG(std::string, out, "",
          "pull: write the flat float32 parameters to this file. export: write the trained "
          "model to this TorchScript file (torch.jit.load reads it).");

// --- tributary local ---

// The reason `tributary local` gives the job it stops on Ctrl-C: a later run in the
// same --run_dir recognizes it and resumes the job.
constexpr char kInterruptedReason[] = "tributary local interrupted";
// local: --progress_interval's bounds, and how often the job is asked whether it ended.
constexpr double kMinProgressInterval = 0.05;
constexpr double kMaxProgressInterval = 3600;
constexpr absl::Duration kJobPollInterval = absl::Milliseconds(500);
ABSL_FLAG(int, ps_shards, 2,
          "local: parameter server shards to start (processes on this machine), in [1, 4 x "
          "usable cores]. Default: 2.");
ABSL_DECLARE_FLAG(uint32_t, replicas);  // cli/job_flags.cc
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

constexpr char kUsage[] =
    "tributary: Tributary's command line.\n"
    "  tributary local  [job flags]   start a cluster on loopback and train (see --helpfull)\n"
    "  tributary submit [job flags]   submit a job to --coordinator\n"
    "  tributary spec [job flags]     print the JobSpec the job flags describe, as JSON\n"
    "  tributary status [--json]      the cluster and its job\n"
    "  tributary pause|resume|stop    control the active job (--reason)\n"
    "  tributary pull --out=FILE      the current parameters from the PS shards\n"
    "  tributary export --out=FILE    the trained model as TorchScript (--job_id)\n"
    "  tributary show RUN_DIR         the dashboard of a finished run, read-only\n"
    "  tributary auth-header          an x-tributary-auth value for grpcurl\n"
    "                                 (--cluster_token_file, --role)\n"
    "Job flags: --model, --layers, --dataset, --batch, --epochs, --optimizer, --lr, --mode,\n"
    "--replicas, ... (tributary --helpfull lists them all with their defaults).";

std::unique_ptr<v1::Coordinator::Stub> Connect(const std::string& address) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(address, ChannelOptionsFromFlags(Role::kOperator));
  if (!channel.ok()) {
    std::cerr << "tributary: " << channel.status() << "\n";
    std::exit(2);
  }
  return v1::Coordinator::NewStub(*channel);
}

void Authorize(grpc::ClientContext& context) {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) return;
  absl::StatusOr<std::string> token = ReadFileToString(path);
  if (!token.ok()) {
    std::cerr << "tributary: --token_file: " << token.status() << "\n";
    std::exit(2);
  }
  std::string value = *token;
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  context.AddMetadata("authorization", "Bearer " + value);
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

int Fail(const absl::Status& status) {
  std::cerr << "tributary: " << status << "\n";
  return 1;
}

// A refused control call says how to send the token when none was given.
absl::Status WithTokenHint(absl::Status status) {
  if (absl::IsUnauthenticated(status) && absl::GetFlag(FLAGS_token_file).empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(status.message(),
                     "; pass the coordinator's control token with --token_file=FILE"));
  }
  return status;
}

// Seconds the job has trained: from its start to its end, or to now while it runs.
double TrainingSeconds(const v1::Job& job) {
  if (!job.has_started()) return 0;
  const absl::Time started = FromProto(job.started());
  const absl::Time until = job.has_finished() ? FromProto(job.finished()) : absl::Now();
  return std::max(0.0, absl::ToDoubleSeconds(until - started));
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%02d:%02d", s / 60, s % 60);
}

// "<sep>name value" for each named metric, by name.
std::string MetricsText(const google::protobuf::Map<std::string, double>& metrics,
                        const std::string& separator) {
  std::map<std::string, double> sorted(metrics.begin(), metrics.end());
  std::string text;
  for (const auto& [name, value] : sorted) {
    absl::StrAppend(&text, separator, name, " ", absl::StrFormat("%.4f", value));
  }
  return text;
}

// One line of progress from the coordinator's view of the job.
std::string ProgressLine(const v1::Job& job, double elapsed) {
  float loss = NAN, accuracy = -1;
  double samples_per_second = 0;
  // A model with its own loss has no accuracy: its test loss and named metrics say
  // how it does.
  std::string evaluation;
  if (job.progress_size() > 0) {
    const v1::ProgressPoint& last = job.progress(job.progress_size() - 1);
    loss = last.loss();
    // A paused job moves no samples; its last figure would say it does.
    samples_per_second = job.state() == v1::PAUSED ? 0 : last.samples_per_second();
    for (int i = job.progress_size() - 1; i >= 0; --i) {
      const v1::ProgressPoint& point = job.progress(i);
      if (point.test_accuracy() >= 0 || point.metrics_size() > 0 || point.test_loss() != 0) {
        accuracy = point.test_accuracy();
        if (accuracy < 0) absl::StrAppend(&evaluation, absl::StrFormat("  test_loss %.4f", point.test_loss()));
        absl::StrAppend(&evaluation, MetricsText(point.metrics(), "  "));
        break;
      }
    }
  }
  const double steps_per_second = job.step() > 0 && elapsed > 0 ? job.step() / elapsed : 0;
  const double eta = steps_per_second > 0 && job.total_steps() >= job.step()
                         ? (job.total_steps() - job.step()) / steps_per_second
                         : -1;
  const uint32_t epochs = job.spec().epochs();
  // Counted from 1; the job's epoch is the one the next step belongs to, which is one
  // past the last once every step ran.
  uint32_t epoch = job.epoch() + 1;
  if (epochs > 0) epoch = std::min(epoch, epochs);
  // A job that cannot start yet says why.
  const std::string waiting =
      job.waiting_reason().empty() ? std::string() : absl::StrCat("  (", job.waiting_reason(), ")");
  return absl::StrFormat(
      "%-10s epoch %u%s  step %llu/%llu  loss %s  acc %s%s  %s samples/s  elapsed %s  ETA %s%s",
      v1::JobState_Name(job.state()), epoch,
      epochs > 0 ? absl::StrCat("/", epochs) : std::string(),
      static_cast<unsigned long long>(job.step()),
      static_cast<unsigned long long>(job.total_steps()),
      std::isnan(loss) ? std::string("-") : absl::StrFormat("%.4f", loss),
      accuracy < 0 ? std::string("-") : absl::StrFormat("%.4f", accuracy), evaluation,
      absl::StrFormat("%.0f", samples_per_second), FormatDuration(elapsed), FormatDuration(eta),
      waiting);
}

absl::StatusOr<v1::Job> GetJob(v1::Coordinator::Stub& stub, const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  absl::Status status = FromGrpcStatus(stub.GetJob(&context, request, &job), "GetJob");
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<v1::Job> Submit(v1::Coordinator::Stub& stub, const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  Authorize(context);
  absl::Status status = FromGrpcStatus(stub.SubmitJob(&context, request, &job), "SubmitJob");
  if (!status.ok()) return status;
  return job;
}

// Loads --model_file with LibTorch (and, given its data, runs it on a few samples) so
// that a bad file is refused here, naming the problem. Without LibTorch in this build
// the workers are left to check it.
absl::Status CheckModelFlag(const v1::JobSpec& spec,
                            const std::shared_ptr<const std::string>& bytes,
                            const engine::Dataset* train) {
  const v1::TorchScriptFile& file = spec.model().torchscript();
  if (!engine::BuiltWithTorch()) {
    std::cerr << "tributary: " << engine::TorchDescription() << ": " << file.file_name()
              << " is not checked here; the workers will check it\n";
    return absl::OkStatus();
  }
  if (absl::Status checked = CheckModelFile(file, bytes, train); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model_file: ", checked.message()));
  }
  return absl::OkStatus();
}

// Uploads the job's TorchScript file (checked before) to the coordinator.
absl::Status UploadModel(v1::Coordinator::Stub& stub, const v1::JobSpec& spec,
                         const std::string& bytes) {
  const v1::TorchScriptFile& file = spec.model().torchscript();
  absl::StatusOr<v1::UploadModelResponse> uploaded =
      UploadModelFile(stub, file, bytes, [](grpc::ClientContext& c) { Authorize(c); });
  if (!uploaded.ok()) return uploaded.status();
  std::cout << "model " << file.file_name() << ": " << uploaded->size_bytes() << " bytes, sha256 "
            << uploaded->sha256().substr(0, 12) << "..."
            << (uploaded->already_stored() ? " (already on the coordinator)" : " uploaded")
            << std::endl;
  return absl::OkStatus();
}

int RunSubmit() {
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(&model_file);
  if (!spec.ok()) return Fail(spec.status());
  auto stub = Connect(absl::GetFlag(FLAGS_coordinator));
  if (model_file != nullptr) {
    // The data may live only on the workers' machines: the file alone is checked here.
    if (absl::Status checked = CheckModelFlag(*spec, model_file, nullptr); !checked.ok()) {
      return Fail(checked);
    }
    if (absl::Status uploaded = UploadModel(*stub, *spec, *model_file); !uploaded.ok()) {
      return Fail(WithTokenHint(uploaded));
    }
  }
  absl::StatusOr<v1::Job> job = Submit(*stub, *spec);
  if (!job.ok()) return Fail(WithTokenHint(job.status()));
  std::cout << "submitted " << job->job_id() << " (" << v1::JobState_Name(job->state())
            << ")\n";
  return 0;
}

// `tributary spec [job flags]`: the JobSpec the flags describe, as proto3 JSON (what
// `submit` would send, before the coordinator's defaults), checked as the coordinator
// checks it. For --job_json, grpcurl's SubmitJob and the Python client.
int RunSpec() {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(nullptr);
  if (!spec.ok()) return Fail(spec.status());
  if (absl::Status valid = ValidateJobSpec(WithDefaults(*spec)); !valid.ok()) return Fail(valid);
  std::cout << ToJson(*spec) << "\n";
  return 0;
}

int RunControl(const std::string& verb) {
  auto stub = Connect(absl::GetFlag(FLAGS_coordinator));
  v1::JobControlRequest request;
  request.set_job_id(absl::GetFlag(FLAGS_job_id));
  request.set_reason(absl::GetFlag(FLAGS_reason).empty() ? "tributary " + verb
                                                         : absl::GetFlag(FLAGS_reason));
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Authorize(context);
  grpc::Status status;
  if (verb == "pause") status = stub->PauseJob(&context, request, &job);
  if (verb == "resume") status = stub->ResumeJob(&context, request, &job);
  if (verb == "stop") status = stub->StopJob(&context, request, &job);
  if (!status.ok()) return Fail(WithTokenHint(FromGrpcStatus(status, verb)));
  std::cout << job.job_id() << ": " << v1::JobState_Name(job.state()) << "\n";
  return 0;
}

int RunStatus() {
  auto stub = Connect(absl::GetFlag(FLAGS_coordinator));
  v1::ClusterStatus status;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status rpc = stub->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status);
  if (!rpc.ok()) return Fail(FromGrpcStatus(rpc, "GetClusterStatus"));
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(status) << "\n";
    return 0;
  }
  if (status.has_job()) {
    std::cout << status.job().job_id() << " "
              << ProgressLine(status.job(), TrainingSeconds(status.job())) << "\n";
    if (!status.job().state_reason().empty()) {
      std::cout << "  " << status.job().state_reason() << "\n";
    }
  } else {
    std::cout << "no job\n";
  }
  if (!status.waiting_reason().empty()) std::cout << "waiting: " << status.waiting_reason() << "\n";
  std::cout << "generation " << status.generation() << ", " << status.nodes_size()
            << " node(s), " << status.idle_workers_size() << " idle worker(s), "
            << status.shards_size() << "/" << status.expected_shards() << " PS shard(s)\n";
  for (const v1::NodeInfo& node : status.nodes()) {
    for (const v1::WorkerInfo& worker : node.workers()) {
      std::cout << absl::StrFormat("  %-12s %-10s rank %u  step %llu  %.0f samples/s%s\n",
                                   worker.worker_id(), node.node_name(),
                                   worker.assignment().global_rank(),
                                   static_cast<unsigned long long>(worker.step()),
                                   worker.samples_per_second(),
                                   worker.straggler() ? "  STRAGGLER" : "");
    }
  }
  return 0;
}

int RunPull() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("pull needs --out=FILE"));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(absl::GetFlag(FLAGS_coordinator), ChannelOptionsFromFlags(Role::kOperator));
  if (!channel.ok()) return Fail(channel.status());
  absl::StatusOr<PulledParameters> params = PullParameters(*channel, ChannelOptionsFromFlags(Role::kOperator));
  if (!params.ok()) return Fail(params.status());
  if (absl::Status written = WriteParameters(*params, out); !written.ok()) return Fail(written);
  std::cout << "wrote " << params->values.size() << " parameters of job " << params->job_id
            << " (step " << params->step << ") to " << out << "\n";
  return 0;
}

int RunExport() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("export needs --out=FILE.pt"));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(absl::GetFlag(FLAGS_coordinator), ChannelOptionsFromFlags(Role::kOperator));
  if (!channel.ok()) return Fail(channel.status());
  absl::StatusOr<ExportResult> exported =
      ExportModel(*channel, ChannelOptionsFromFlags(Role::kOperator), absl::GetFlag(FLAGS_job_id), out);
  if (!exported.ok()) return Fail(exported.status());
  std::cout << "exported " << exported->model << " of job " << exported->job_id << " (step "
            << exported->step << ", " << exported->parameters << " values) to " << out << "\n";
  return 0;
}

// Paths the workers open must not depend on the directory they run in.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

// --- tributary local ---

struct Summary {
  v1::Job job;
  double wall_seconds = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
};

std::string SummaryJson(const Summary& summary) {
  const v1::Job& job = summary.job;
  const v1::JobResult& result = job.result();
  const double samples_per_second =
      result.samples_per_second() > 0
          ? result.samples_per_second()
          : (job.progress_size() > 0
                 ? job.progress(job.progress_size() - 1).samples_per_second()
                 : 0);
  float final_loss = result.final_loss();
  if (final_loss == 0 && job.progress_size() > 0) {
    final_loss = job.progress(job.progress_size() - 1).loss();
  }
  // The model's named metrics, by name ({} when it has none).
  std::map<std::string, double> metrics(result.metrics().begin(), result.metrics().end());
  std::string metrics_json = "{";
  for (const auto& [name, value] : metrics) {
    absl::StrAppend(&metrics_json, metrics_json.size() > 1 ? "," : "", "\"", name, "\":",
                    absl::StrFormat("%.6g", value));
  }
  metrics_json += "}";
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(job.spec(), &spec_json, options);
  return absl::StrFormat(
      "{\"job_id\":\"%s\",\"state\":\"%s\",\"test_accuracy\":%.6f,\"test_loss\":%.6f,"
      "\"final_loss\":%.6f,\"steps\":%llu,\"samples_per_second\":%.2f,\"wall_seconds\":%.3f,"
      "\"training_seconds\":%.3f,"
      "\"bytes_pushed\":%llu,\"bytes_pulled\":%llu,\"metrics\":%s,\"job_spec\":%s}",
      job.job_id(), v1::JobState_Name(job.state()), result.test_accuracy(), result.test_loss(),
      final_loss, static_cast<unsigned long long>(job.step()), samples_per_second,
      summary.wall_seconds, TrainingSeconds(job),
      static_cast<unsigned long long>(summary.bytes_pushed),
      static_cast<unsigned long long>(summary.bytes_pulled), metrics_json, spec_json);
}

// Periodic checkpoints of `tributary local` when --checkpoint_interval is not given.
constexpr uint64_t kLocalCheckpointInterval = 500;
// `tributary local --ps_shards`: at most this many shard processes per usable core.
constexpr int kLocalShardsPerCore = 4;

// What a run does about the job an earlier run in its directory left: follow it (the
// coordinator restored it unfinished), or submit `spec` (which may resume it).
struct Continuation {
  std::optional<v1::Job> follow;
  v1::JobSpec spec;
};

// The same job, as far as continuing it goes: the spec but for where it starts.
bool SameJob(v1::JobSpec a, v1::JobSpec b) {
  for (v1::JobSpec* spec : {&a, &b}) {
    spec->clear_resume_from();
    spec->clear_init_from();
  }
  return google::protobuf::util::MessageDifferencer::Equals(WithDefaults(a), WithDefaults(b));
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

absl::StatusOr<Continuation> ContinueEarlierRun(v1::Coordinator::Stub& stub,
                                                const v1::JobSpec& spec) {
  Continuation continuation;
  continuation.spec = spec;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListJobsResponse jobs;
  absl::Status listed =
      FromGrpcStatus(stub.ListJobs(&context, v1::ListJobsRequest(), &jobs), "ListJobs");
  if (!listed.ok()) return listed;
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
    grpc::ClientContext stop_context;
    stop_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::JobControlRequest request;
    request.set_job_id(last.job_id());
    request.set_reason(fresh ? "tributary local --fresh" : "a tributary local run with other flags");
    v1::Job stopped;
    absl::Status stop = FromGrpcStatus(stub.StopJob(&stop_context, request, &stopped), "StopJob");
    if (!stop.ok()) return stop;
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

int RunLocal(const char* argv0, ShutdownSignal& shutdown) {
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(&model_file);
  if (!spec.ok()) return Fail(spec.status());
  v1::DatasetSpec& dataset = *spec->mutable_dataset();
  dataset.set_directory(Absolute(dataset.directory()));
  dataset.set_train_path(Absolute(dataset.train_path()));
  dataset.set_test_path(Absolute(dataset.test_path()));
  dataset.set_train_labels_path(Absolute(dataset.train_labels_path()));
  dataset.set_test_labels_path(Absolute(dataset.test_labels_path()));
  if (model_file != nullptr && !engine::BuiltWithTorch()) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "--model_file: this build has ", engine::TorchDescription(),
        ", so its workers cannot run TorchScript models")));
  }
  spec->set_init_from(Absolute(spec->init_from()));
  if (spec->devices() == v1::GPU && absl::GetFlag(FLAGS_devices) == "cpu") {
    return Fail(absl::InvalidArgumentError(
        "--job_devices=gpu needs GPU workers, but --devices=cpu starts CPU-only ones: the job "
        "could never be placed (use --devices=auto or gpu:N, or --job_devices=auto)"));
  }
  // The data, the model and its starting point are checked now, before any process
  // starts: a missing directory or a model that does not fit the data is found here.
  {
    absl::StatusOr<engine::Datasets> data = engine::LoadDatasets(dataset, spec->seed());
    if (!data.ok()) return Fail(data.status());
    if (model_file != nullptr) {
      if (absl::Status checked = CheckModelFlag(*spec, model_file, &data->train); !checked.ok()) {
        return Fail(checked);
      }
    } else {
      absl::StatusOr<engine::ModelDef> model =
          engine::BuildJobModel(spec->model(), nullptr, data->train);
      if (!model.ok()) return Fail(absl::InvalidArgumentError(model.status().message()));
      if (!spec->init_from().empty()) {
        absl::StatusOr<std::vector<float>> initial = ReadParameters(spec->init_from());
        if (!initial.ok()) {
          return Fail(absl::InvalidArgumentError(
              absl::StrCat("--init_from: ", initial.status().message())));
        }
        if (initial->size() != model->num_parameters) {
          return Fail(absl::InvalidArgumentError(absl::StrCat(
              "--init_from=", spec->init_from(), ": ", initial->size(),
              " float32 values, but the model has ", model->num_parameters, " parameters")));
        }
      }
    }
  }
  // Periodic checkpoints unless asked otherwise, so an interrupted run can continue.
  if (!FlagGiven("checkpoint_interval") && !FlagGiven("job_json")) {
    spec->set_checkpoint_interval_steps(kLocalCheckpointInterval);
  }
  LocalClusterOptions options;
  if (absl::Status found = LocateBinaries(argv0, absl::GetFlag(FLAGS_bin_dir), options);
      !found.ok()) {
    return Fail(found);
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
  // The thread budget: every worker runs on this machine, so its cores are shared out
  // among all their replicas (a worker alone would take them all). By default each core
  // gets one replica with one compute thread (measured best here: docs/performance.md);
  // more replicas than cores only when asked (--oversubscribe).
  const int cores = UsableCores();
  const int workers = std::max(1, options.workers);
  // GPU workers (--devices other than cpu) get one replica per worker by default: a
  // replica there is a GPU.
  const bool cpu_workers = absl::GetFlag(FLAGS_devices) == "cpu";
  if (absl::GetFlag(FLAGS_replicas) == 0 && !FlagGiven("job_json")) {
    spec->set_replicas_per_worker(
        cpu_workers ? static_cast<uint32_t>(std::clamp(cores / workers, 1, 64)) : 1);
  }
  const int replicas = workers * static_cast<int>(std::max(1u, spec->replicas_per_worker()));
  if (cpu_workers && replicas > cores && !absl::GetFlag(FLAGS_oversubscribe)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--workers=", workers, " x --replicas=", spec->replicas_per_worker(), " = ", replicas,
        " replicas on this machine's ", cores,
        " cores: each would get less than a core. Use fewer, or pass --oversubscribe")));
  }
  bool threads_given = false;
  for (const std::string& arg : options.worker_args) {
    threads_given = threads_given || absl::StartsWith(arg, "--cpu_threads");
  }
  if (!threads_given) {
    options.worker_args.push_back(absl::StrCat("--cpu_threads=", std::max(1, cores / replicas)));
  }
  if (options.ps_shards < 1 || options.workers < 1) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--ps_shards=", options.ps_shards, " --workers=", options.workers, ": both must be >= 1")));
  }
  const double progress_interval = absl::GetFlag(FLAGS_progress_interval);
  if (!(progress_interval >= kMinProgressInterval && progress_interval <= kMaxProgressInterval)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--progress_interval=", progress_interval, ": must be from ",
                     kMinProgressInterval, " to ", kMaxProgressInterval, " seconds")));
  }
  // Every shard is a process of its own with its threads, on this one machine.
  const int most_shards = std::min<int>(kMaxPsShards, kLocalShardsPerCore * cores);
  if (options.ps_shards > most_shards) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--ps_shards=", options.ps_shards, ": at most ", most_shards, " on this machine (",
        kLocalShardsPerCore, " per usable core, ", cores, " cores)")));
  }
  const int nodes = options.nodes > 0 ? std::min(options.nodes, options.workers) : options.workers;
  // The job needs every node this cluster starts, unless the flags say otherwise.
  if (!FlagGiven("nodes_min") && spec->nodes_min() <= 1) {
    spec->set_nodes_min(nodes);
    if (spec->nodes_max() < spec->nodes_min()) spec->set_nodes_max(nodes);
  }
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (options.run_dir.empty()) {
    char pattern[] = "/tmp/tributary-local-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return Fail(absl::InternalError("mkdtemp failed"));
    options.run_dir = pattern;
  }
  // One run per directory: its logs, state and checkpoints are this run's.
  absl::StatusOr<int> lock = LockRunDirectory(options.run_dir, absl::Seconds(15));
  if (!lock.ok()) return Fail(lock.status());

  const absl::Time start = absl::Now();
  std::cout << "tributary local: coordinator, " << options.ps_shards << " PS shard(s), "
            << options.workers << " worker(s) on " << nodes << " node(s), "
            << spec->replicas_per_worker() << " replica(s) each; logs in " << options.run_dir
            << std::endl;
  LocalCluster cluster(options);
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

  auto stub = v1::Coordinator::NewStub(cluster.coordinator_channel());
  if (model_file != nullptr) {
    absl::Status uploaded = UploadModel(*stub, *spec, *model_file);
    if (!uploaded.ok()) {
      cluster.Stop();
      return Fail(uploaded);
    }
  }
  // A run dir an earlier run was interrupted in: continue its job (or start over).
  absl::StatusOr<Continuation> continuation = ContinueEarlierRun(*stub, *spec);
  if (!continuation.ok()) {
    cluster.Stop();
    return Fail(continuation.status());
  }
  absl::StatusOr<v1::Job> submitted =
      continuation->follow.has_value() ? absl::StatusOr<v1::Job>(*continuation->follow)
                                       : Submit(*stub, continuation->spec);
  if (!submitted.ok()) {
    cluster.Stop();
    return Fail(submitted.status());
  }
  std::cout << "job " << submitted->job_id() << ": " << spec->model().name() << " on "
            << v1::DatasetFormat_Name(spec->dataset().format()) << ", batch "
            << spec->global_batch_size() << ", "
            << v1::TrainingMode_Name(spec->mode()) << std::endl;

  const bool tty = isatty(STDOUT_FILENO);
  const absl::Duration interval = absl::Seconds(progress_interval);
  // The job's end is seen within kJobPollInterval, whatever --progress_interval says:
  // the lines come at that interval, not the exit.
  const absl::Duration poll = std::min(interval, kJobPollInterval);
  absl::Time last_line = absl::InfinitePast(), next_update = absl::InfinitePast();
  v1::Job job = *submitted;
  int exit_code = 0;
  while (true) {
    if (shutdown.WaitFor(poll)) {
      std::cout << (tty ? "\n" : "") << "interrupted: stopping the job and the cluster"
                << std::endl;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::JobControlRequest request;
      request.set_reason(kInterruptedReason);
      v1::Job stopped;
      if (stub->StopJob(&context, request, &stopped).ok()) job = stopped;
      exit_code = 130;
      break;
    }
    if (absl::Status alive = cluster.CheckProcesses(); !alive.ok()) {
      std::cout << (tty ? "\n" : "");
      std::cerr << "tributary local: " << alive.message() << std::endl;
      exit_code = 1;
      break;
    }
    absl::StatusOr<v1::Job> current = GetJob(*stub, submitted->job_id());
    if (!current.ok()) continue;
    job = *current;
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
        exit_code = 1;
      }
      break;
    }
  }

  Summary summary;
  summary.job = job;
  summary.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  summary.bytes_pushed = job.result().bytes_pushed();
  summary.bytes_pulled = job.result().bytes_pulled();
  if (!absl::GetFlag(FLAGS_params_out).empty() && job.state() == v1::COMPLETED) {
    absl::StatusOr<PulledParameters> params =
        PullParameters(cluster.coordinator_channel(), cluster.channel_options());
    absl::Status written = params.ok()
                               ? WriteParameters(*params, absl::GetFlag(FLAGS_params_out))
                               : params.status();
    if (!written.ok()) {
      std::cerr << "tributary local: --params_out: " << written << std::endl;
      exit_code = 1;
    }
  }
  const std::string export_path = absl::GetFlag(FLAGS_export);
  if (!export_path.empty()) {
    if (job.state() == v1::COMPLETED) {
      absl::StatusOr<ExportResult> exported =
          ExportModel(cluster.coordinator_channel(), cluster.channel_options(), job.job_id(),
                      export_path);
      if (exported.ok()) {
        std::cout << "exported " << exported->model << " (step " << exported->step << ") to "
                  << export_path << std::endl;
      } else {
        std::cerr << "tributary local: --export: " << exported.status() << std::endl;
        exit_code = 1;
      }
    } else {
      std::cerr << "tributary local: --export: not written, the job is "
                << v1::JobState_Name(job.state()) << std::endl;
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
                     static_cast<unsigned long long>(job.step()), summary.wall_seconds,
                     evaluation, MetricsText(result.metrics(), ", test "), result.final_loss(),
                     result.samples_per_second(), summary.bytes_pushed / 1e6,
                     summary.bytes_pulled / 1e6);
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
  cluster.Stop();
  std::cout << "its dashboard again: tributary show " << options.run_dir << std::endl;
  if (KeepDashboardRequested() && !shutdown.requested()) {
    absl::Status kept = KeepDashboard(options.run_dir, cluster.dashboard_port(), shutdown);
    if (!kept.ok()) std::cerr << "tributary local: --keep_dashboard: " << kept.message() << "\n";
  }
  return exit_code;
}

}  // namespace
}  // namespace tributary::cli

int main(int argc, char** argv) {
  tributary::cli::RememberGivenFlags(argc, argv);
  std::vector<std::string> args = tributary::InitProcess(argc, argv, tributary::cli::kUsage);
  FLAGS_minloglevel = 1;  // The CLI speaks for itself; glog only for warnings.
  if (args.size() < 2) {
    std::cerr << tributary::cli::kUsage << "\n";
    return 2;
  }
  const std::string& command = args[1];
  if (command == "local") {
    tributary::ShutdownSignal shutdown;
    return tributary::cli::RunLocal(argv[0], shutdown);
  }
  if (command == "show") {
    tributary::ShutdownSignal shutdown;
    return tributary::cli::RunShow(args, shutdown);
  }
  if (command == "spec") return tributary::cli::RunSpec();
  if (command != "local" && command != "version") {
    // The operator's cluster credential (for pull, export and reads of the shards).
    absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
        tributary::ClusterAuthFromFlags();
    if (!auth.ok()) {
      std::cerr << "tributary: " << auth.status().message() << "\n";
      return 2;
    }
  }
  if (command == "auth-header") {
    absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
        tributary::ClusterAuthFromFlags();
    if (auth.ok() && *auth == nullptr) {
      std::cerr << "tributary: auth-header needs --cluster_token_file\n";
      return 2;
    }
    const std::string role = absl::GetFlag(FLAGS_role);
    for (tributary::Role r : {tributary::Role::kOperator, tributary::Role::kWorker,
                              tributary::Role::kParameterServer, tributary::Role::kCoordinator}) {
      if (role == tributary::RoleName(r)) {
        std::cout << (*auth)->HeaderFor(r) << "\n";
        return 0;
      }
    }
    std::cerr << "tributary: --role=" << role
              << ": not one of operator, worker, parameter_server, coordinator\n";
    return 2;
  }
  if (command == "submit") return tributary::cli::RunSubmit();
  if (command == "status") return tributary::cli::RunStatus();
  if (command == "pull") return tributary::cli::RunPull();
  if (command == "export") return tributary::cli::RunExport();
  if (command == "pause" || command == "resume" || command == "stop") {
    return tributary::cli::RunControl(command);
  }
  if (command == "version") {
    std::cout << "tributary " << tributary::kVersion << "\n";
    return 0;
  }
  std::cerr << "tributary: unknown command '" << command << "'\n" << tributary::cli::kUsage << "\n";
  return 2;
}
