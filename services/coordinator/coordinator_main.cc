// The coordinator binary: membership, GPU and rank assignment, rendezvous ids and
// KV, the job lifecycle, failure detection and the dashboard. One per cluster.
#include <glog/logging.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/service_host.h"
#include "common/shutdown.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/coordinator/control_token.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/coordinator_driver.h"
#include "services/coordinator/coordinator_metrics.h"
#include "services/coordinator/dashboard.h"
#include "services/coordinator/grpc_service.h"
#include "services/coordinator/grpc_shard_client.h"
#include "services/coordinator/model_store.h"

// --- Network ---
ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC listen address host:port (port 0 picks a free one). Default: 0.0.0.0:50051.");
ABSL_FLAG(int, http_port, 8080,
          "HTTP port for the dashboard, /api/v1/status, /metrics and /healthz "
          "(0 picks a free one, -1 disables). Default: 8080.");

// --- Cluster ---
ABSL_FLAG(int, ps_shards, 1,
          "Parameter-server shards a job needs (shard indices 0..N-1) before its first "
          "generation forms. Count, in [1, 1024]. Default: 1.");

// --- Membership and failure detection ---
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "How often workers heartbeat (sent to them at registration). Duration. Default: 1s.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "A worker silent this long is removed and its generation ends. Duration, longer "
          "than --heartbeat_interval. Default: 10s.");
ABSL_FLAG(absl::Duration, settle_window, absl::Seconds(2),
          "Once nodes_min node groups are present, how long to wait for up to nodes_max "
          "before forming a generation (also the debounce of a scale-up). Duration. "
          "Default: 2s.");
ABSL_FLAG(absl::Duration, formation_timeout, absl::Minutes(10),
          "A job whose generation keeps failing to form (PS shards that refuse or cannot "
          "be reached) for this long goes FAILED with the last reason; 0 = never. "
          "Default: 10m.");
ABSL_FLAG(int, max_generation_failures, 3,
          "A job fails when this many generations in a row end by worker errors without "
          "completing a step (0 = never by this rule). Count. Default: 3.");
ABSL_FLAG(double, straggler_factor, 1.5,
          "A worker whose step time exceeds this factor times the generation's median is "
          "marked a straggler on the dashboard. Ratio, > 1. Default: 1.5.");

// --- Rendezvous KV ---
ABSL_FLAG(int64_t, rendezvous_max_value_bytes, 1 << 20,
          "Largest value PublishRendezvous accepts. Bytes. Default: 1048576 (1 MiB).");
ABSL_FLAG(int64_t, rendezvous_max_keys, 4096,
          "Most keys one rendezvous id may hold. Count. Default: 4096.");
ABSL_FLAG(absl::Duration, rendezvous_max_wait, absl::Minutes(10),
          "Longer WaitRendezvous timeouts are cut to this. Duration. Default: 10m.");

// --- Parameter-server shards ---
ABSL_FLAG(absl::Duration, shard_poll_interval, absl::Seconds(2),
          "How often the shards' status is polled for the dashboard. Duration. Default: 2s.");
ABSL_FLAG(absl::Duration, shard_rpc_timeout, absl::Seconds(5),
          "Deadline of each call to a shard (GetShardStatus, BeginGeneration, EndJob). "
          "Duration. Default: 5s.");

// --- State and history ---
ABSL_FLAG(std::string, state_dir, "",
          "Directory of the coordinator's state file (jobs, events, last step, generation), "
          "so it survives a restart. Empty = keep nothing. Default: empty.");
ABSL_FLAG(absl::Duration, state_save_interval, absl::Seconds(5),
          "Progress-only changes are written at most this often (state changes at once). "
          "Duration. Default: 5s.");
ABSL_FLAG(int, progress_history, 1000,
          "Progress points kept per job; older ones are thinned, never the whole curve. "
          "Count, >= 2. Default: 1000.");
ABSL_FLAG(int, max_job_events, 1000,
          "Events kept per job (the oldest go first). Count. Default: 1000.");
ABSL_FLAG(int, history_points, 2000,
          "Per-step history: step points and evaluations kept per job (every step up to "
          "this many, then an even stride that doubles as it fills, always the last step). "
          "Count, 2..10000. Default: 2000.");
ABSL_FLAG(int, history_worker_points, 500,
          "Per-step history: points kept in each worker's timeline (thinned the same way; "
          "64 workers per job have one). Count, 2..800. Default: 500.");

// --- Model files ---
ABSL_FLAG(int64_t, max_model_bytes, tributary::kMaxModelFileBytes,
          "Largest TorchScript file UploadModel accepts. Bytes. Default: 268435456 (256 MiB).");
ABSL_FLAG(int64_t, max_stored_model_bytes, int64_t{4} << 30,
          "Model files kept in all (under --state_dir/models, or in memory without a state "
          "dir); an upload beyond it is refused. Bytes. Default: 4294967296 (4 GiB).");
ABSL_FLAG(absl::Duration, upload_timeout, absl::Minutes(10),
          "Longest an UploadModel stream may stay open; past it the upload is cancelled and "
          "what it sent freed. Duration. Default: 10m.");
ABSL_FLAG(absl::Duration, upload_idle_timeout, absl::Seconds(30),
          "Longest an UploadModel stream may go without a message (an upload slot is not "
          "held by a silent client). Duration. Default: 30s.");

// --- Security ---
ABSL_FLAG(std::string, control_token_file, "",
          "File holding the operator token. When set, SubmitJob/PauseJob/ResumeJob/StopJob "
          "need 'authorization: Bearer <token>' metadata (else UNAUTHENTICATED); read-only "
          "calls stay open. Default: empty (no token).");

namespace {

// Flag values that cannot work, named; empty when all are fine.
std::string BadFlags() {
  if (absl::GetFlag(FLAGS_ps_shards) < 1 ||
      absl::GetFlag(FLAGS_ps_shards) > static_cast<int>(tributary::kMaxPsShards)) {
    return absl::StrCat("--ps_shards must be in [1, ", tributary::kMaxPsShards, "], got ",
                        absl::GetFlag(FLAGS_ps_shards));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, absl::Duration>{"upload_timeout", absl::GetFlag(FLAGS_upload_timeout)},
        {"upload_idle_timeout", absl::GetFlag(FLAGS_upload_idle_timeout)}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::StrCat("--", name, " must be > 0, got ", absl::FormatDuration(value));
    }
  }
  if (absl::GetFlag(FLAGS_heartbeat_interval) <= absl::ZeroDuration()) {
    return absl::StrCat("--heartbeat_interval must be > 0, got ",
                        absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_interval)));
  }
  if (absl::GetFlag(FLAGS_heartbeat_timeout) <= absl::GetFlag(FLAGS_heartbeat_interval)) {
    return absl::StrCat("--heartbeat_timeout (",
                        absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_timeout)),
                        ") must be longer than --heartbeat_interval (",
                        absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_interval)), ")");
  }
  if (absl::GetFlag(FLAGS_settle_window) < absl::ZeroDuration()) {
    return "--settle_window must be >= 0";
  }
  if (absl::GetFlag(FLAGS_rendezvous_max_value_bytes) < 1) {
    return "--rendezvous_max_value_bytes must be >= 1";
  }
  if (absl::GetFlag(FLAGS_rendezvous_max_keys) < 1) return "--rendezvous_max_keys must be >= 1";
  if (absl::GetFlag(FLAGS_progress_history) < 2) return "--progress_history must be >= 2";
  if (absl::GetFlag(FLAGS_max_job_events) < 1) return "--max_job_events must be >= 1";
  if (absl::GetFlag(FLAGS_history_points) < 2 || absl::GetFlag(FLAGS_history_points) > 10000) {
    return absl::StrCat("--history_points must be in [2, 10000], got ",
                        absl::GetFlag(FLAGS_history_points));
  }
  if (absl::GetFlag(FLAGS_history_worker_points) < 2 ||
      absl::GetFlag(FLAGS_history_worker_points) > 800) {
    return absl::StrCat("--history_worker_points must be in [2, 800], got ",
                        absl::GetFlag(FLAGS_history_worker_points));
  }
  if (absl::GetFlag(FLAGS_formation_timeout) < absl::ZeroDuration()) {
    return "--formation_timeout must be >= 0";
  }
  if (absl::GetFlag(FLAGS_max_generation_failures) < 0) {
    return "--max_generation_failures must be >= 0";
  }
  if (!(absl::GetFlag(FLAGS_straggler_factor) > 1)) return "--straggler_factor must be > 1";
  if (absl::GetFlag(FLAGS_max_model_bytes) < 1 ||
      absl::GetFlag(FLAGS_max_stored_model_bytes) < absl::GetFlag(FLAGS_max_model_bytes)) {
    return absl::StrCat("--max_model_bytes (", absl::GetFlag(FLAGS_max_model_bytes),
                        ") must be >= 1 and <= --max_stored_model_bytes (",
                        absl::GetFlag(FLAGS_max_stored_model_bytes), ")");
  }
  if (absl::GetFlag(FLAGS_shard_poll_interval) <= absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_shard_rpc_timeout) <= absl::ZeroDuration()) {
    return "--shard_poll_interval and --shard_rpc_timeout must be > 0";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "coordinator: Tributary's membership, rendezvous and job service.\n"
                         "Usage: coordinator [--listen=HOST:PORT] [--http_port=N] "
                         "[--ps_shards=N] [--state_dir=DIR] ...");
  tributary::ShutdownSignal shutdown;
  namespace coord = tributary::coordinator;

  if (const std::string bad = BadFlags(); !bad.empty()) {
    LOG(ERROR) << bad;
    return 2;
  }
  std::optional<std::string> control_token;
  if (const std::string path = absl::GetFlag(FLAGS_control_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = coord::ReadControlToken(path);
    if (!token.ok()) {
      LOG(ERROR) << token.status().message();
      return 2;
    }
    control_token = *std::move(token);
  }

  absl::StatusOr<std::shared_ptr<const tributary::ClusterAuth>> auth =
      tributary::ServerClusterAuthFromFlags("coordinator");
  if (!auth.ok()) {
    LOG(ERROR) << auth.status().message();
    return 2;
  }

  coord::CoordinatorOptions options;
  // Worker and node credentials: made under a key of this process's own, which nobody
  // derives from the cluster secret (common/issued_credentials.h).
  std::shared_ptr<const tributary::CredentialIssuer> issuer;
  if (*auth != nullptr) {
    absl::StatusOr<tributary::CredentialIssuer> made = tributary::CredentialIssuer::Random();
    if (!made.ok()) {
      LOG(ERROR) << made.status().message();
      return 1;
    }
    issuer = std::make_shared<const tributary::CredentialIssuer>(*std::move(made));
    options.node_credential = [issuer](const std::string& job, uint64_t generation,
                                       uint32_t node_rank) {
      return issuer->Node(job, generation, node_rank);
    };
    options.worker_credential = [issuer](const std::string& worker_id) {
      return issuer->Worker(worker_id);
    };
  }
  options.ps_shards = static_cast<uint32_t>(absl::GetFlag(FLAGS_ps_shards));
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.settle_window = absl::GetFlag(FLAGS_settle_window);
  options.rendezvous.max_value_bytes = absl::GetFlag(FLAGS_rendezvous_max_value_bytes);
  options.rendezvous.max_keys = absl::GetFlag(FLAGS_rendezvous_max_keys);
  options.rendezvous.max_wait = absl::GetFlag(FLAGS_rendezvous_max_wait);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.state_save_interval = absl::GetFlag(FLAGS_state_save_interval);
  options.progress_history = static_cast<size_t>(absl::GetFlag(FLAGS_progress_history));
  options.max_events = static_cast<size_t>(absl::GetFlag(FLAGS_max_job_events));
  options.history_points = static_cast<size_t>(absl::GetFlag(FLAGS_history_points));
  options.history_worker_points = static_cast<size_t>(absl::GetFlag(FLAGS_history_worker_points));
  options.max_generation_failures =
      static_cast<uint32_t>(absl::GetFlag(FLAGS_max_generation_failures));
  options.straggler_factor = absl::GetFlag(FLAGS_straggler_factor);
  options.formation_timeout = absl::GetFlag(FLAGS_formation_timeout);
  options.shard_poll_interval = absl::GetFlag(FLAGS_shard_poll_interval);
  options.version = tributary::kVersion;

  coord::ModelStoreOptions model_options;
  if (!options.state_dir.empty()) model_options.directory = options.state_dir + "/models";
  model_options.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  model_options.max_stored_bytes = absl::GetFlag(FLAGS_max_stored_model_bytes);
  coord::ModelStore models(model_options);  // Opened once Start() made the state dir.
  options.model_size = [&models](const std::string& sha256) { return models.Size(sha256); };

  tributary::RealClock clock;
  coord::GrpcShardClient shard_client(
      tributary::ChannelOptionsFromFlags(tributary::Role::kCoordinator),
      absl::GetFlag(FLAGS_shard_rpc_timeout));
  coord::Coordinator coordinator(options, &clock, &shard_client);
  if (absl::Status started = coordinator.Start(); !started.ok()) {
    LOG(ERROR) << "cannot start the coordinator: " << started.message();
    return 1;
  }
  if (absl::Status opened = models.Open(); !opened.ok()) {
    LOG(ERROR) << "cannot open the model store: " << opened.message();
    return 1;
  }

  coord::UploadLimits upload_limits;
  upload_limits.total = absl::GetFlag(FLAGS_upload_timeout);
  upload_limits.idle = absl::GetFlag(FLAGS_upload_idle_timeout);
  coord::CoordinatorGrpcService service(&coordinator, control_token, &models, *auth, issuer,
                                        upload_limits);
  // Room for the largest rendezvous value or model chunk plus the rest of the message.
  const int64_t max_receive = std::max<int64_t>(
      (4 << 20) + (64 << 10), absl::GetFlag(FLAGS_rendezvous_max_value_bytes) + (64 << 10));
  tributary::ServiceHost host(tributary::ServerOptions::FromFlags(
      "coordinator", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_http_port), max_receive));
  host.AddService(&service, tributary::v1::Coordinator::service_full_name());
  if (host.http() != nullptr) {
    coord::AddDashboardRoutes(*host.http(), coord::DashboardDataOf(coordinator));
  }
  coord::CoordinatorMetrics metrics(*host.registry());
  coord::CoordinatorDriver driver(&coordinator, [&] {
    metrics.Update(coordinator.GetClusterStatus(), coordinator.rendezvous().stats(),
                   coordinator.counters());
    service.ExpireStalledUploads();
  });
  driver.Start();
  if (control_token.has_value()) LOG(INFO) << "job control needs the bearer token";
  if (*auth != nullptr) LOG(INFO) << "internal calls need the cluster credential of their role";
  const int exit_code = tributary::ServeUntilShutdown(host, shutdown);
  driver.Stop();
  coordinator.Flush();  // The histories and progress not written yet.
  return exit_code;
}
