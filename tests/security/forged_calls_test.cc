// The cluster credential against forged calls (issue "Trust"): a real cluster of
// separate processes with the secret `tributary local` makes, a job paused mid-run,
// and every forged call of the issue made twice, by a stranger (no credential: it must
// be UNAUTHENTICATED) and by a component of the wrong role or node (PERMISSION_DENIED).
// The job then resumes and must end with exactly the single-replica parameters, so the
// forged calls changed nothing. Also: servers refuse to start without a credential
// unless told --allow_unauthenticated.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/parameters.h"
#include "common/child_process.h"
#include "common/cluster_auth.h"
#include "common/data_plane_wire.h"
#include "common/partition_codec.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/parameter_server.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/security/forgery.h"
#include "tests/training/cluster_fixture.h"

namespace tributary::testing {
namespace {

#define EXPECT_REFUSED(call, code, who)                                                  \
  do {                                                                                   \
    const grpc::Status status_ = (call);                                                 \
    EXPECT_EQ(status_.error_code(), (code)) << (who) << ": " << status_.error_message(); \
  } while (0)

TEST(ForgedCallsTest, EveryForgedCallIsRefusedAndChangesNothing) {
  ClusterShape shape;
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("forged", shape);
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<std::shared_ptr<const ClusterAuth>> auth =
      ClusterAuth::FromFile("cluster_token_file", cluster->cluster_token_file());
  ASSERT_TRUE(auth.ok()) << auth.status();

  const uint64_t kSteps = 5000;  // Long enough to be paused mid-run.
  v1::JobSpec spec = SyntheticJob(32, kSteps);
  spec.set_nodes_min(2);  // Both workers, as nodes 0 and 1.
  spec.set_nodes_max(2);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string job_id = submitted->job_id();
  absl::StatusOr<v1::Job> running = WaitForJob(
      *cluster, job_id,
      [](const v1::Job& job) {
        return (job.state() == v1::RUNNING && job.step() >= 5) || Finished(job);
      },
      absl::Minutes(2));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_EQ(running->state(), v1::RUNNING) << "the job ended before it could be paused";
  auto coordinator = v1::Coordinator::NewStub(cluster->coordinator_channel());
  {
    grpc::ClientContext context;
    v1::JobControlRequest pause;
    pause.set_job_id(job_id);
    v1::Job paused;
    ASSERT_TRUE(coordinator->PauseJob(&context, pause, &paused).ok());
  }
  // Paused once every worker says so; from then on the shards stand still.
  absl::StatusOr<v1::Job> paused = WaitForJob(
      *cluster, job_id,
      [&](const v1::Job& job) {
        if (job.state() != v1::PAUSED) return false;
        v1::ListWorkersResponse workers;
        grpc::ClientContext context;
        if (!coordinator->ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok()) {
          return false;
        }
        for (const v1::WorkerInfo& worker : workers.workers()) {
          if (worker.phase() != v1::WORKER_PAUSED) return false;
        }
        return workers.workers_size() == 2;
      },
      absl::Minutes(1));
  ASSERT_TRUE(paused.ok()) << paused.status();

  // The real workers, as the operator sees them.
  v1::ListWorkersResponse workers;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(coordinator->ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok());
  }
  ASSERT_EQ(workers.workers_size(), 2);
  for (const v1::WorkerInfo& worker : workers.workers()) {
    EXPECT_TRUE(worker.assignment().node_credential().empty())
        << "ListWorkers must not show a worker's node credential";
  }

  const Caller stranger{"a stranger", "", ""};
  const Caller as_worker{"a worker", (*auth)->HeaderFor(Role::kWorker), ""};
  const Caller as_operator{"the operator", (*auth)->HeaderFor(Role::kOperator), ""};
  const Caller foreign{
      "another cluster's worker",
      (*ClusterAuth::FromSecret("another-cluster-secret"))->HeaderFor(Role::kWorker), ""};
  using grpc::StatusCode;
  auto coordinator_plain = v1::Coordinator::NewStub(Plain(cluster->coordinator_address()));

  // Coordinator: a worker's failure report, a deregistration, a shard registration.
  for (const v1::WorkerInfo& worker : workers.workers()) {
    v1::HeartbeatRequest heartbeat;
    heartbeat.set_worker_id(worker.worker_id());
    heartbeat.set_generation(paused->generation());
    heartbeat.set_phase(v1::WORKER_FAILED);
    v1::HeartbeatResponse reply;
    for (const Caller* caller : {&stranger, &foreign}) {
      EXPECT_REFUSED(coordinator_plain->Heartbeat(ContextOf(*caller).get(), heartbeat, &reply),
                     StatusCode::UNAUTHENTICATED, caller->name);
    }
    EXPECT_REFUSED(coordinator_plain->Heartbeat(ContextOf(as_operator).get(), heartbeat, &reply),
                   StatusCode::PERMISSION_DENIED, as_operator.name);
    // A worker (the role is right) reporting for another worker id, with the credential
    // a holder of the secret derives for it.
    const Caller other_worker{
        "a worker with a credential derived from the secret", as_worker.auth_header, "",
        DerivedFromTheSecret(cluster->cluster_token_file(),
                             "tributary-worker:" + worker.worker_id())};
    for (const Caller* caller : {&as_worker, &other_worker}) {
      EXPECT_REFUSED(coordinator_plain->Heartbeat(ContextOf(*caller).get(), heartbeat, &reply),
                     StatusCode::PERMISSION_DENIED, caller->name);
    }
    v1::DeregisterRequest deregister;
    deregister.set_worker_id(worker.worker_id());
    v1::DeregisterResponse gone;
    EXPECT_REFUSED(coordinator_plain->Deregister(ContextOf(stranger).get(), deregister, &gone),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(coordinator_plain->Deregister(ContextOf(as_operator).get(), deregister, &gone),
                   StatusCode::PERMISSION_DENIED, as_operator.name);
    EXPECT_REFUSED(coordinator_plain->Deregister(ContextOf(as_worker).get(), deregister, &gone),
                   StatusCode::PERMISSION_DENIED, "a worker without that worker's credential");
  }
  {
    v1::RegisterParameterServerRequest shard;
    shard.set_address("127.0.0.1:1");
    shard.set_shard_index(0);
    v1::RegisterParameterServerResponse reply;
    EXPECT_REFUSED(
        coordinator_plain->RegisterParameterServer(ContextOf(stranger).get(), shard, &reply),
        StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(
        coordinator_plain->RegisterParameterServer(ContextOf(as_worker).get(), shard, &reply),
        StatusCode::PERMISSION_DENIED, as_worker.name);
    v1::ListWorkersResponse listed;
    EXPECT_REFUSED(coordinator_plain->ListWorkers(ContextOf(stranger).get(),
                                                  v1::ListWorkersRequest(), &listed),
                   StatusCode::UNAUTHENTICATED, stranger.name);
  }

  // Parameter server: pushes for node 0 (which would be taken as node 0's gradient and
  // the real one dropped as a duplicate), generations, job ends, checkpoints.
  absl::StatusOr<std::vector<v1::ShardStatus>> before = ShardStatuses(*cluster);
  ASSERT_TRUE(before.ok()) << before.status();
  const uint32_t elements = 16;  // Any size: the push is refused before it is looked at.
  // Node credentials as a holder of the cluster secret would forge them (issue 23: such
  // a push once replaced node 0's and took accuracy from 1.0 to 0.615).
  auto derived_node = [&](uint64_t generation, uint32_t rank) {
    return DerivedFromTheSecret(cluster->cluster_token_file(),
                                absl::StrCat("tributary-node:", job_id, "/", generation, "/", rank));
  };
  const std::string wrong_node = derived_node(paused->generation(), 0);
  const std::string old_generation = derived_node(paused->generation() - 1, 0);
  for (const std::string& shard : cluster->shard_addresses()) {
    EXPECT_EQ(ForgedPush(shard, stranger, *paused, 0, elements).error_code(),
              StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(ForgedPush(shard, as_operator, *paused, 0, elements).error_code(),
              StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(ForgedPush(shard, as_worker, *paused, 0, elements).error_code(),
              StatusCode::PERMISSION_DENIED)
        << "a worker without node 0's credential";
    EXPECT_EQ(ForgedPush(shard, Caller{"forger", as_worker.auth_header, wrong_node}, *paused, 0,
                         elements)
                  .error_code(),
              StatusCode::PERMISSION_DENIED)
        << "node 0's credential derived from the secret";
    EXPECT_EQ(ForgedPush(shard, Caller{"old", as_worker.auth_header, old_generation}, *paused, 0,
                         elements)
                  .error_code(),
              StatusCode::PERMISSION_DENIED)
        << "an older generation's credential";

    auto ps = v1::ParameterServer::NewStub(Plain(shard));
    v1::BeginGenerationRequest begin;
    begin.set_job_id(job_id);
    begin.set_generation(paused->generation() + 1);
    begin.set_num_nodes(1u << 26);
    v1::BeginGenerationResponse begun;
    EXPECT_REFUSED(ps->BeginGeneration(ContextOf(stranger).get(), begin, &begun),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(ps->BeginGeneration(ContextOf(as_worker).get(), begin, &begun),
                   StatusCode::PERMISSION_DENIED, as_worker.name);
    v1::EndJobRequest end;
    end.set_job_id(job_id);
    v1::EndJobResponse ended;
    EXPECT_REFUSED(ps->EndJob(ContextOf(stranger).get(), end, &ended), StatusCode::UNAUTHENTICATED,
                   stranger.name);
    EXPECT_REFUSED(ps->EndJob(ContextOf(as_operator).get(), end, &ended),
                   StatusCode::PERMISSION_DENIED, as_operator.name);
    v1::RestoreJobRequest restore;
    restore.set_job_id("job-9-forged");
    restore.set_from_job_id(job_id);
    restore.set_list_only(true);
    v1::RestoreJobResponse restored;
    EXPECT_REFUSED(ps->RestoreJob(ContextOf(stranger).get(), restore, &restored),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(ps->RestoreJob(ContextOf(as_worker).get(), restore, &restored),
                   StatusCode::PERMISSION_DENIED, as_worker.name);
    EXPECT_REFUSED(ps->RestoreJob(ContextOf(as_operator).get(), restore, &restored),
                   StatusCode::PERMISSION_DENIED, as_operator.name);
    // The data plane: tickets only for a node's own credential, and a connection speaks
    // only for the node its ticket names.
    v1::OpenDataPlaneRequest open;
    open.set_job_id(job_id);
    open.set_generation(paused->generation());
    open.set_node_rank(0);
    v1::OpenDataPlaneResponse ticket;
    EXPECT_REFUSED(ps->OpenDataPlane(ContextOf(stranger).get(), open, &ticket),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(ps->OpenDataPlane(ContextOf(as_operator).get(), open, &ticket),
                   StatusCode::PERMISSION_DENIED, as_operator.name);
    EXPECT_REFUSED(ps->OpenDataPlane(ContextOf(as_worker).get(), open, &ticket),
                   StatusCode::PERMISSION_DENIED, as_worker.name);
    const Caller forger{"a forger", as_worker.auth_header, wrong_node};
    EXPECT_REFUSED(ps->OpenDataPlane(ContextOf(forger).get(), open, &ticket),
                   StatusCode::PERMISSION_DENIED, "node 0's credential derived from the secret");
    // Ranks outside the 2-node generation get no ticket, whatever the credential.
    for (uint32_t rank : {2u, 3u, 299u}) {
      open.set_node_rank(rank);
      const Caller outside{"outside", as_worker.auth_header, derived_node(paused->generation(), rank)};
      EXPECT_REFUSED(ps->OpenDataPlane(ContextOf(outside).get(), open, &ticket),
                     StatusCode::PERMISSION_DENIED, absl::StrCat("node rank ", rank));
    }

    v1::CheckpointResponse checkpoint;
    EXPECT_REFUSED(ps->Checkpoint(ContextOf(stranger).get(), v1::CheckpointRequest(), &checkpoint),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(ps->Checkpoint(ContextOf(as_worker).get(), v1::CheckpointRequest(), &checkpoint),
                   StatusCode::PERMISSION_DENIED, as_worker.name);
    v1::ShardStatus status;
    EXPECT_REFUSED(
        ps->GetShardStatus(ContextOf(stranger).get(), v1::GetShardStatusRequest(), &status),
        StatusCode::UNAUTHENTICATED, stranger.name);
  }

  // Workers: a Drain would make them leave.
  for (const std::string& address : cluster->worker_addresses()) {
    auto worker = v1::Worker::NewStub(Plain(address));
    v1::DrainRequest drain;
    drain.set_reason("forged");
    v1::DrainResponse drained;
    EXPECT_REFUSED(worker->Drain(ContextOf(stranger).get(), drain, &drained),
                   StatusCode::UNAUTHENTICATED, stranger.name);
    EXPECT_REFUSED(worker->Drain(ContextOf(as_worker).get(), drain, &drained),
                   StatusCode::PERMISSION_DENIED, as_worker.name);
  }

  // Nothing changed: the shards stand where they stood, and the job resumes and ends
  // with exactly the parameters of one replica training alone.
  absl::StatusOr<std::vector<v1::ShardStatus>> after = ShardStatuses(*cluster);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < after->size(); ++i) {
    EXPECT_EQ((*after)[i].generation(), (*before)[i].generation()) << "shard " << i;
    EXPECT_EQ((*after)[i].step(), (*before)[i].step()) << "shard " << i;
    EXPECT_EQ((*after)[i].pushes_accepted(), (*before)[i].pushes_accepted()) << "shard " << i;
    EXPECT_EQ((*after)[i].pushes_duplicate(), (*before)[i].pushes_duplicate()) << "shard " << i;
  }
  {
    grpc::ClientContext context;
    v1::JobControlRequest resume;
    resume.set_job_id(job_id);
    v1::Job resumed;
    ASSERT_TRUE(coordinator->ResumeJob(&context, resume, &resumed).ok());
  }
  absl::StatusOr<v1::Job> done = WaitForJob(*cluster, job_id, Finished, absl::Minutes(3));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::COMPLETED) << done->state_reason();
  EXPECT_EQ(done->generation(), paused->generation()) << "no generation was forced";
  absl::StatusOr<cli::PulledParameters> pulled =
      cli::PullParameters(cluster->coordinator_channel(), cluster->channel_options());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->step, kSteps);
  EXPECT_LE(MaxRelativeDifference(pulled->values, ReferenceParameters(spec, kSteps)), 1e-5);
}

// Data paths a job names stay under the workers' --data_root, and what a data file
// holds never reaches the job's error (GetJob, the dashboard).
TEST(ForgedCallsTest, DataPathsAreConfinedAndTheirContentsNeverShown) {
  const std::string root = ::testing::TempDir() + "/data_root";
  mkdir(root.c_str(), 0755);
  std::ofstream(root + "/secret.csv") << "hunter2-secret,0.5\n";
  ClusterShape shape;
  shape.workers = 1;
  shape.worker_args = {"--data_root=" + root};
  struct Case {
    std::string path;
    std::string expected;
  };
  {
    // A '..' is refused at submission, naming the field (before any worker sees it).
    std::unique_ptr<cli::LocalCluster> cluster = StartCluster("data_root", shape);
    ASSERT_NE(cluster, nullptr);
    v1::JobSpec spec = SyntheticJob(8, 10);
    spec.mutable_dataset()->set_format(v1::CSV);
    spec.mutable_dataset()->set_train_path(root + "/../data_root/secret.csv");
    absl::StatusOr<v1::Job> refused = SubmitJob(*cluster, spec);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "dataset.train_path"))
        << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "'..' is not allowed"))
        << refused.status();
  }
  for (const Case& c : {Case{"/etc/hostname", "outside --data_root=" + root},
                        Case{root + "/secret.csv", "is not an integer"}}) {
    // A cluster per case: tributary local's workers leave after their job.
    std::unique_ptr<cli::LocalCluster> cluster = StartCluster("data_root", shape);
    ASSERT_NE(cluster, nullptr);
    v1::JobSpec spec = SyntheticJob(8, 10);
    spec.mutable_dataset()->set_format(v1::CSV);
    spec.mutable_dataset()->set_train_path(c.path);
    absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    absl::StatusOr<v1::Job> job =
        WaitForJob(*cluster, submitted->job_id(), Finished, absl::Minutes(1));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::FAILED) << c.path;
    EXPECT_TRUE(absl::StrContains(job->state_reason(), c.expected)) << job->state_reason();
    EXPECT_FALSE(absl::StrContains(job->DebugString(), "hunter2")) << job->DebugString();
  }
}

// A shard that stops answering (SIGSTOP: its port still accepts connections, nothing
// answers, as with a black-holed host) shows in the job's waiting reason; once it
// answers again the job goes on and completes.
TEST(ForgedCallsTest, AShardThatStopsAnsweringShowsInTheWaitingReason) {
  ClusterShape shape;
  shape.coordinator_args = {"--shard_rpc_timeout=1s"};
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("black_hole", shape);
  ASSERT_NE(cluster, nullptr);
  v1::JobSpec spec = SyntheticJob(32, 100000);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  absl::StatusOr<v1::Job> running = WaitForJob(
      *cluster, submitted->job_id(),
      [](const v1::Job& job) { return job.state() == v1::RUNNING && job.step() >= 5; },
      absl::Minutes(2));
  ASSERT_TRUE(running.ok()) << running.status();
  ChildProcess* shard = cluster->processes()[2];  // Coordinator, shard 0, shard 1, ...
  shard->Signal(SIGSTOP);
  absl::StatusOr<v1::Job> waiting = WaitForJob(
      *cluster, submitted->job_id(),
      [](const v1::Job& job) {
        return absl::StrContains(job.waiting_reason(), "PS shard 1 at ") &&
               absl::StrContains(job.waiting_reason(), "is not answering");
      },
      absl::Seconds(30));
  shard->Signal(SIGCONT);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->state(), v1::RUNNING);
  // Answering again: the reason goes away and training goes on.
  absl::StatusOr<v1::Job> again = WaitForJob(
      *cluster, submitted->job_id(),
      [&](const v1::Job& job) {
        return job.waiting_reason().empty() && job.step() > waiting->step() + 5;
      },
      absl::Seconds(60));
  ASSERT_TRUE(again.ok()) << again.status();
  grpc::ClientContext context;
  v1::JobControlRequest stop;
  stop.set_job_id(submitted->job_id());
  v1::Job stopped;
  EXPECT_TRUE(v1::Coordinator::NewStub(cluster->coordinator_channel())
                  ->StopJob(&context, stop, &stopped)
                  .ok());
}

// A node that leaves and joins again while a tiny, fast model trains (no checkpoints):
// the members of the ended generation push on while the next one forms, and the
// shards must still reach a common step and re-form, every time. (Before the fence,
// 3 of 3 such joins never re-formed.) The worker leaves on its own (SIGTERM: it
// deregisters) and its process starts again.
TEST(ForgedCallsTest, AJoinWhileTrainingReformsEveryTime) {
  ClusterShape shape;
  std::unique_ptr<cli::LocalCluster> cluster = StartCluster("join_race", shape);
  ASSERT_NE(cluster, nullptr);
  v1::JobSpec spec = SyntheticJob(8, 1000000);
  spec.set_nodes_min(1);
  spec.set_nodes_max(2);
  absl::StatusOr<v1::Job> submitted = SubmitJob(*cluster, spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string job_id = submitted->job_id();
  auto coordinator = v1::Coordinator::NewStub(cluster->coordinator_channel());
  auto both_training = [&](uint64_t after_generation, uint64_t after_step) {
    return [&, after_generation, after_step](const v1::Job& job) {
      if (job.state() != v1::RUNNING || job.generation() <= after_generation ||
          job.step() < after_step + 20) {
        return false;
      }
      v1::ListWorkersResponse workers;
      grpc::ClientContext context;
      if (!coordinator->ListWorkers(&context, v1::ListWorkersRequest(), &workers).ok()) {
        return false;
      }
      int in_generation = 0;
      for (const v1::WorkerInfo& worker : workers.workers()) {
        if (worker.assignment().generation() == job.generation()) ++in_generation;
      }
      return in_generation == 2;
    };
  };
  absl::StatusOr<v1::Job> job = WaitForJob(*cluster, job_id, both_training(0, 0), absl::Minutes(2));
  ASSERT_TRUE(job.ok()) << job.status();
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::Status left =
        cluster->KillAndRestart(absl::StrCat("worker-", attempt % 2), /*gracefully=*/true);
    ASSERT_TRUE(left.ok()) << left;
    absl::StatusOr<v1::Job> reformed = WaitForJob(
        *cluster, job_id, both_training(job->generation(), job->step()), absl::Minutes(1));
    ASSERT_TRUE(reformed.ok()) << "attempt " << attempt << ": " << reformed.status();
    job = reformed;
  }
  grpc::ClientContext context;
  v1::JobControlRequest stop;
  stop.set_job_id(job_id);
  v1::Job stopped;
  EXPECT_TRUE(coordinator->StopJob(&context, stop, &stopped).ok());
}

TEST(ForgedCallsTest, ServersRefuseToStartWithoutACredentialUnlessTold) {
  cli::LocalClusterOptions options;
  ASSERT_TRUE(cli::LocateBinaries("", "", options).ok());
  const std::string dir = ::testing::TempDir();
  for (const std::string& binary :
       {options.coordinator_binary, options.parameter_server_binary, options.worker_binary}) {
    const std::string log = dir + "/no_credential.log";
    std::remove(log.c_str());
    std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0", "--http_port=0"};
    if (binary != options.coordinator_binary) argv.push_back("--coordinator=127.0.0.1:1");
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start("no-credential", argv, log);
    ASSERT_TRUE(child.ok()) << child.status();
    ASSERT_TRUE((*child)->Wait(absl::Seconds(30))) << binary << " did not exit";
    EXPECT_EQ((*child)->exit_code(), 2) << binary;
    EXPECT_TRUE(absl::StrContains((*child)->LogTail(5), "no --cluster_token_file"))
        << (*child)->LogTail(5);

    // A secret that is too short is refused with the path, not the contents.
    const std::string token = dir + "/short.token";
    FILE* file = std::fopen(token.c_str(), "w");
    std::fputs("short-secret", file);
    std::fclose(file);
    argv.push_back("--cluster_token_file=" + token);
    absl::StatusOr<std::unique_ptr<ChildProcess>> short_secret =
        ChildProcess::Start("short-secret", argv, log);
    ASSERT_TRUE(short_secret.ok());
    ASSERT_TRUE((*short_secret)->Wait(absl::Seconds(30)));
    EXPECT_EQ((*short_secret)->exit_code(), 2) << binary;
    const std::string tail = (*short_secret)->LogTail(5);
    EXPECT_TRUE(absl::StrContains(tail, token)) << tail;
    EXPECT_FALSE(absl::StrContains(tail, "short-secret")) << tail;

    // Roles from certificates without mutual TLS to take them from.
    const std::string good = dir + "/good.token";
    file = std::fopen(good.c_str(), "w");
    std::fputs("0123456789abcdef0123456789abcdef", file);
    std::fclose(file);
    argv.back() = "--cluster_token_file=" + good;
    argv.push_back("--certificate_roles");
    absl::StatusOr<std::unique_ptr<ChildProcess>> no_tls =
        ChildProcess::Start("certificate-roles", argv, log);
    ASSERT_TRUE(no_tls.ok());
    ASSERT_TRUE((*no_tls)->Wait(absl::Seconds(30)));
    EXPECT_EQ((*no_tls)->exit_code(), 2) << binary;
    EXPECT_TRUE(absl::StrContains((*no_tls)->LogTail(5), "--certificate_roles needs mutual TLS"))
        << (*no_tls)->LogTail(5);
  }
}

}  // namespace
}  // namespace tributary::testing
