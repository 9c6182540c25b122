// Over 600 lines on purpose: one in-process server fixture for every RPC's wire
// behaviour (status codes, streaming, tokens, the dashboard).
// The coordinator as the binary runs it, in-process on port 0, through the real gRPC
// client: jobs submitted as JSON, invalid specs rejected field by field, the control
// token, workers and a fake ParameterServer service going through a whole job,
// rendezvous waits over gRPC (concurrent, timed out, cancelled), /api/v1/status and
// /metrics.
#include "services/coordinator/grpc_service.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/channel.h"
#include "common/grpc_status.h"
#include "common/service_host.h"
#include "common/testing/prometheus_text.h"
#include "proto/coordinator.grpc.pb.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/coordinator_driver.h"
#include "services/coordinator/coordinator_metrics.h"
#include "services/coordinator/dashboard.h"
#include "services/coordinator/grpc_shard_client.h"
#include "services/coordinator/model_store.h"
#include "common/sha256.h"
#include "services/coordinator/testing/fake_parameter_server.h"

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";

ServerOptions Loopback(const std::string& name, int http_port) {
  ServerOptions options;
  options.name = name;
  options.listen_address = "127.0.0.1:0";
  options.http_host = "127.0.0.1";
  options.http_port = http_port;
  options.drain_grace = absl::ZeroDuration();
  return options;
}

// Polls `condition` until it holds; false after 30 s (a hang, not a timing check).
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// A fake PS shard and a coordinator wired exactly as coordinator_main.cc wires them.
class Cluster {
 public:
  explicit Cluster(std::optional<std::string> token = std::nullopt, int64_t max_value_bytes = 1024)
      : ps_(0),
        ps_host_(Loopback("ps", -1)),
        shard_client_(ChannelOptions(), absl::Seconds(5)),
        models_(ModelOptions()),
        coordinator_(Options(max_value_bytes, &models_), &clock_, &shard_client_),
        service_(&coordinator_, std::move(token), &models_),
        host_(Loopback("coordinator", 0)),
        metrics_(*host_.registry()),
        driver_(&coordinator_, [this] {
          metrics_.Update(coordinator_.GetClusterStatus(), coordinator_.rendezvous().stats(),
                          coordinator_.counters());
        }) {
    ps_host_.AddService(&ps_, v1::ParameterServer::service_full_name());
    EXPECT_TRUE(ps_host_.Start().ok());
    ps_host_.SetServing(true);
    EXPECT_TRUE(coordinator_.Start().ok());
    host_.AddService(&service_, v1::Coordinator::service_full_name());
    AddDashboardRoutes(*host_.http(), DashboardDataOf(coordinator_));
    EXPECT_TRUE(host_.Start().ok());
    host_.SetServing(true);
    driver_.Start();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", host_.grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Coordinator::NewStub(channel_);
  }

  ~Cluster() {
    stub_.reset();  // Open client connections would hold the server's shutdown.
    channel_.reset();
    host_.Shutdown(absl::Seconds(1));
    driver_.Stop();
    ps_host_.Shutdown(absl::Seconds(1));
  }

  static ModelStoreOptions ModelOptions() {
    ModelStoreOptions options;  // In memory.
    options.max_model_bytes = 10 << 20;
    return options;
  }

  static CoordinatorOptions Options(int64_t max_value_bytes, ModelStore* models) {
    CoordinatorOptions options;
    options.model_size = [models](const std::string& sha256) { return models->Size(sha256); };
    options.ps_shards = 1;
    options.heartbeat_interval = absl::Milliseconds(100);
    options.heartbeat_timeout = absl::Minutes(5);
    options.settle_window = absl::ZeroDuration();
    options.shard_poll_interval = absl::Milliseconds(200);
    options.rendezvous.max_value_bytes = max_value_bytes;
    options.version = "test-version";
    return options;
  }

  v1::Coordinator::Stub& stub() { return *stub_; }
  testing::FakeParameterServer& ps() { return ps_; }
  std::string ps_address() const { return ps_host_.advertised_address(); }
  int http_port() const { return host_.http_port(); }
  Coordinator& coordinator() { return coordinator_; }

 private:
  RealClock clock_;
  testing::FakeParameterServer ps_;
  ServiceHost ps_host_;
  GrpcShardClient shard_client_;
  ModelStore models_;
  Coordinator coordinator_;
  CoordinatorGrpcService service_;
  ServiceHost host_;
  CoordinatorMetrics metrics_;
  CoordinatorDriver driver_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

v1::SubmitJobRequest FromJson(const std::string& json) {
  v1::SubmitJobRequest request;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &request);
  EXPECT_TRUE(parsed.ok()) << parsed.ToString() << " in " << json;
  return request;
}

grpc::Status Submit(Cluster& cluster, const std::string& json, v1::Job* job,
                    const std::string& token = "") {
  return cluster.stub().SubmitJob(Context(token).get(), FromJson(json), job);
}

TEST(CoordinatorServiceTest, JobApiWithJsonInput) {
  Cluster cluster;
  // Both JSON spellings (lowerCamelCase and the proto field names) work, as in grpcurl -d.
  const std::string json = R"({"spec": {
      "name": "fashion-mlp",
      "model": {"name": "mlp", "layerSizes": [784, 128, 10]},
      "dataset": {"format": "SYNTHETIC", "synthetic_train_samples": 640},
      "globalBatchSize": 64, "epochs": 2,
      "optimizer": {"type": "MOMENTUM", "learning_rate": 0.05},
      "nodes_min": 2, "nodesMax": 3, "mode": "SYNC"}})";
  v1::Job job;
  ASSERT_TRUE(Submit(cluster, json, &job).ok());
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_THAT(job.job_id(), HasSubstr("job-1-"));
  EXPECT_EQ(job.spec().name(), "fashion-mlp");
  EXPECT_EQ(job.spec().nodes_max(), 3u);
  EXPECT_FLOAT_EQ(job.spec().optimizer().momentum(), 0.9f) << "defaults filled in";
  EXPECT_EQ(job.spec().replicas_per_worker(), 1u);
  EXPECT_EQ(job.total_steps(), 20u);
  ASSERT_EQ(job.events_size(), 1);
  EXPECT_THAT(job.events(0).reason(), HasSubstr("submitted"));

  v1::GetJobRequest get;
  get.set_job_id(job.job_id());
  v1::Job fetched;
  ASSERT_TRUE(cluster.stub().GetJob(Context().get(), get, &fetched).ok());
  EXPECT_EQ(fetched.job_id(), job.job_id());
  v1::Job active;
  ASSERT_TRUE(cluster.stub().GetJob(Context().get(), v1::GetJobRequest(), &active).ok());
  EXPECT_EQ(active.job_id(), job.job_id());
  get.set_job_id("job-404");
  const grpc::Status missing = cluster.stub().GetJob(Context().get(), get, &fetched);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("job-404"));

  // One active job at a time.
  v1::Job second;
  const grpc::Status busy = Submit(cluster, json, &second);
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(busy.error_message(), HasSubstr(job.job_id()));

  v1::JobControlRequest stop;
  stop.set_reason("test over");
  v1::Job stopped;
  ASSERT_TRUE(cluster.stub().StopJob(Context().get(), stop, &stopped).ok());
  EXPECT_EQ(stopped.state(), v1::STOPPED);
  ASSERT_TRUE(Submit(cluster, json, &second).ok());
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(cluster.stub().ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 2);
  EXPECT_EQ(jobs.jobs(0).job_id(), second.job_id()) << "newest first";
  EXPECT_EQ(jobs.jobs(1).state(), v1::STOPPED);
}

TEST(CoordinatorServiceTest, InvalidSpecsRejectedFieldByField) {
  Cluster cluster;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"spec": {"model": {"name": "resnet"}}})", "spec.model.name"},
      {R"({"spec": {"model": {"name": "logreg", "layerSizes": [784, 0]}}})",
       "spec.model.layer_sizes"},
      {R"({"spec": {"model": {"dropout": 1.5}}})", "spec.model.dropout"},
      {R"({"spec": {"dataset": {"format": "CSV"}}})", "spec.dataset.train_path"},
      {R"({"spec": {"optimizer": {"learningRate": -0.1}}})", "spec.optimizer.learning_rate"},
      {R"({"spec": {"optimizer": {"type": "MOMENTUM", "momentum": 1.5}}})",
       "spec.optimizer.momentum"},
      {R"({"spec": {"optimizer": {"schedule": {"kind": "STEP"}}}})",
       "spec.optimizer.schedule.step_size"},
      {R"({"spec": {"nodesMin": 3, "nodesMax": 2}})", "spec.nodes_max"},
      {R"({"spec": {"replicasPerWorker": 65}})", "spec.replicas_per_worker"},
      {R"({"spec": {"partitionBytes": 100}})", "spec.partition_bytes"},
  };
  for (const auto& [json, field] : cases) {
    v1::Job job;
    const grpc::Status status = Submit(cluster, json, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << json;
    EXPECT_THAT(status.error_message(), HasSubstr(field)) << json;
  }
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(cluster.stub().ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0) << "nothing invalid was queued";
}

TEST(CoordinatorServiceTest, ControlTokenGuardsMutatingCallsOnly) {
  Cluster cluster{std::string(kToken)};
  const std::string json = R"({"spec": {"dataset": {"format": "SYNTHETIC"}}})";
  v1::Job job;
  grpc::Status status = Submit(cluster, json, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("authorization: Bearer"));
  status = Submit(cluster, json, &job, "wrong-token");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("not valid"));
  auto raw = Context();
  raw->AddMetadata("authorization", kToken);  // Without the scheme.
  EXPECT_EQ(cluster.stub().SubmitJob(raw.get(), FromJson(json), &job).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(Submit(cluster, json, &job, kToken).ok());

  // Read-only calls stay open.
  v1::Job fetched;
  EXPECT_TRUE(cluster.stub().GetJob(Context().get(), v1::GetJobRequest(), &fetched).ok());
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(cluster.stub().ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  v1::ClusterStatus cluster_status;
  EXPECT_TRUE(cluster.stub()
                  .GetClusterStatus(Context().get(), v1::GetClusterStatusRequest(), &cluster_status)
                  .ok());
  v1::ListWorkersResponse workers;
  EXPECT_TRUE(cluster.stub().ListWorkers(Context().get(), v1::ListWorkersRequest(), &workers).ok());

  v1::JobControlRequest control;
  v1::Job reply;
  EXPECT_EQ(cluster.stub().PauseJob(Context().get(), control, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(cluster.stub().ResumeJob(Context().get(), control, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(cluster.stub().StopJob(Context().get(), control, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // With the token the call reaches the job logic (PENDING cannot be paused).
  EXPECT_EQ(cluster.stub().PauseJob(Context(kToken).get(), control, &reply).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(cluster.stub().StopJob(Context(kToken).get(), control, &reply).ok());
}

v1::RegisterWorkerRequest WorkerOn(const std::string& node, uint32_t port) {
  v1::RegisterWorkerRequest request;
  request.set_node_name(node);
  request.set_host("127.0.0.1");
  request.set_grpc_port(port);
  request.set_pid(port);
  v1::Device* cpu = request.add_devices();
  cpu->set_kind(v1::CPU);
  cpu->set_index(-1);
  cpu->set_cpu_cores(2);
  return request;
}

// Heartbeats until the answer carries an assignment.
v1::Assignment AwaitAssignment(Cluster& cluster, const std::string& worker_id) {
  v1::Assignment assignment;
  EXPECT_TRUE(Eventually([&] {
    v1::HeartbeatRequest beat;
    beat.set_worker_id(worker_id);
    beat.set_phase(v1::WORKER_IDLE);
    v1::HeartbeatResponse reply;
    if (!cluster.stub().Heartbeat(Context().get(), beat, &reply).ok()) return false;
    if (reply.action() != v1::ACTION_RENDEZVOUS) return false;
    assignment = reply.assignment();
    return true;
  })) << worker_id
      << " got no assignment";
  return assignment;
}

v1::HeartbeatResponse Beat(Cluster& cluster, const std::string& worker, uint64_t generation,
                           v1::WorkerPhase phase, uint64_t step) {
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);
  beat.set_generation(generation);
  beat.set_phase(phase);
  beat.set_step(step);
  beat.set_loss(2.0f / (1 + step));
  beat.set_test_accuracy(step >= 10 ? 0.8f : -1);
  beat.set_samples_per_second(500);
  beat.set_step_seconds(0.05);
  beat.set_steps_per_epoch(10);
  beat.set_total_steps(20);
  beat.set_bytes_pushed(1 << 20);
  beat.set_bytes_pulled(2 << 20);
  if (phase == v1::WORKER_TRAINING && step > 0) {
    v1::StepReport* ran = beat.add_steps();
    ran->set_step(step);
    ran->set_loss(beat.loss());
    ran->set_samples(32);
    ran->set_step_seconds(0.05);
  }
  v1::HeartbeatResponse reply;
  const grpc::Status status = cluster.stub().Heartbeat(Context().get(), beat, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return reply;
}

// Uploads `bytes` in chunks of `chunk` bytes, with the header `header` (defaults: the
// real name, size and digest).
grpc::Status Upload(v1::Coordinator::Stub& stub, const std::string& bytes,
                    v1::UploadModelResponse* response, const std::string& token = "",
                    size_t chunk = 100000, std::optional<v1::ModelFileHeader> header = {}) {
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  std::unique_ptr<grpc::ClientWriter<v1::UploadModelRequest>> writer =
      stub.UploadModel(&context, response);
  v1::UploadModelRequest request;
  if (header.has_value()) {
    *request.mutable_header() = *header;
  } else {
    request.mutable_header()->set_file_name("net.pt");
    request.mutable_header()->set_size_bytes(bytes.size());
    request.mutable_header()->set_sha256(Sha256Hex(bytes));
  }
  writer->Write(request);
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    request.set_chunk(bytes.substr(at, chunk));
    if (!writer->Write(request)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// Silent uploads do not hold the store's two upload slots for as long as they stay
// connected (issue 23: two held both, with +160 MB, indefinitely): past
// --upload_idle_timeout they are cancelled, and their slots and bytes are free again.
TEST(CoordinatorServiceTest, SilentUploadsAreCancelled) {
  FakeClock clock;
  ModelStore models(ModelStoreOptions{});
  UploadLimits limits;
  limits.idle = absl::Seconds(30);
  limits.total = absl::Minutes(10);
  // No handler call happens in this test: uploads go to the model store alone.
  CoordinatorGrpcService service(nullptr, std::nullopt, &models, nullptr, nullptr, limits,
                                 &clock);
  ServiceHost host(Loopback("coordinator", -1));
  host.AddService(&service, v1::Coordinator::service_full_name());
  ASSERT_TRUE(host.Start().ok());
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", host.grpc_port()), grpc::InsecureChannelCredentials()));
  // Two uploads that send their header and then nothing.
  std::vector<std::thread> silent;
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 2; ++i) {
    silent.emplace_back([&] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      v1::UploadModelResponse response;
      auto writer = stub->UploadModel(&context, &response);
      v1::UploadModelRequest header;
      header.mutable_header()->set_file_name("silent.pt");
      header.mutable_header()->set_sha256(std::string(64, 'a'));
      header.mutable_header()->set_size_bytes(5 << 20);
      writer->Write(header);
      const grpc::Status ended = writer->Finish();
      if (ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) ++cancelled;
      EXPECT_THAT(ended.error_message(), HasSubstr("UploadModel: open for 31s, silent for 31s "
                                                   "(the limit is 30s)"))
          << ended.error_code();
    });
  }
  ASSERT_TRUE(Eventually([&] { return service.open_uploads() == 2; }));
  // Both slots are taken: a third upload is refused now.
  const std::string bytes = std::string("PK\x03\x04", 4) + "net/data.pkl net/version ";
  v1::UploadModelResponse refused;
  EXPECT_EQ(Upload(*stub, bytes, &refused).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  clock.Advance(absl::Seconds(29));
  EXPECT_EQ(service.ExpireStalledUploads(), 0) << "silent, but not for long enough";
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(service.ExpireStalledUploads(), 2);
  for (std::thread& upload : silent) upload.join();
  EXPECT_EQ(cancelled, 2);
  ASSERT_TRUE(Eventually([&] { return service.open_uploads() == 0; }));
  v1::UploadModelResponse uploaded;
  const grpc::Status taken = Upload(*stub, bytes, &uploaded);
  EXPECT_TRUE(taken.ok()) << taken.error_message();
  host.Shutdown(absl::Seconds(1));
}

TEST(CoordinatorServiceTest, ModelFilesTravelUpAndDownAndTorchScriptJobsNeedThem) {
  Cluster cluster(kToken);
  // 2.5 MB: several chunks each way.
  std::string bytes = std::string("PK\x03\x04", 4) + "net/data.pkl net/version ";
  for (int i = 0; bytes.size() < 2500000; ++i) bytes.push_back(static_cast<char>(i * 7 + i / 300));
  v1::UploadModelResponse uploaded;
  grpc::Status anonymous = Upload(cluster.stub(), bytes, &uploaded);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(Upload(cluster.stub(), bytes, &uploaded, kToken).ok());
  EXPECT_EQ(uploaded.sha256(), Sha256Hex(bytes));
  EXPECT_EQ(uploaded.size_bytes(), bytes.size());

  // A refused upload keeps nothing.
  v1::ModelFileHeader lie;
  lie.set_file_name("lie.pt");
  lie.set_size_bytes(bytes.size());
  lie.set_sha256(std::string(64, 'e'));
  v1::UploadModelResponse refused;
  grpc::Status mismatch = Upload(cluster.stub(), bytes, &refused, kToken, 100000, lie);
  EXPECT_EQ(mismatch.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mismatch.error_message(), HasSubstr("model file lie.pt: its bytes have SHA-256"));
  lie.set_size_bytes(20 << 20);
  grpc::Status big = Upload(cluster.stub(), bytes, &refused, kToken, 100000, lie);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Workers fetch it in order, whole.
  {
    grpc::ClientContext context;
    v1::FetchModelRequest request;
    request.set_sha256(uploaded.sha256());
    auto reader = cluster.stub().FetchModel(&context, request);
    std::string fetched;
    v1::ModelChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.offset(), fetched.size());
      EXPECT_EQ(chunk.size_bytes(), bytes.size());
      fetched += chunk.data();
      ++chunks;
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(fetched, bytes);
    EXPECT_EQ(chunks, 3);
  }
  for (const auto& [digest, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{
           {std::string(64, 'e'), grpc::StatusCode::NOT_FOUND},
           {"../../etc/passwd", grpc::StatusCode::INVALID_ARGUMENT},
           {std::string(1 << 16, 'a'), grpc::StatusCode::INVALID_ARGUMENT}}) {
    grpc::ClientContext context;
    v1::FetchModelRequest request;
    request.set_sha256(digest);
    auto reader = cluster.stub().FetchModel(&context, request);
    v1::ModelChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), code) << digest.substr(0, 20);
  }

  auto submit = [&](const std::string& sha256, v1::Job* job) {
    v1::SubmitJobRequest request;
    request.mutable_spec()->mutable_model()->set_name("torchscript");
    request.mutable_spec()->mutable_model()->mutable_torchscript()->set_sha256(sha256);
    request.mutable_spec()->mutable_model()->mutable_torchscript()->set_file_name("net.pt");
    request.mutable_spec()->mutable_dataset()->set_format(v1::SYNTHETIC);
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    return cluster.stub().SubmitJob(&context, request, job);
  };
  v1::Job job;
  grpc::Status unknown = submit(std::string(64, 'e'), &job);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(unknown.error_message(),
              HasSubstr("spec.model.torchscript.sha256: model file net.pt: no stored model file"));
  {
    grpc::ClientContext context;
    v1::ListJobsResponse jobs;
    ASSERT_TRUE(cluster.stub().ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
    EXPECT_EQ(jobs.jobs_size(), 0);  // The refused submission left nothing behind.
  }
  ASSERT_TRUE(submit(uploaded.sha256(), &job).ok());
  EXPECT_EQ(job.spec().model().torchscript().size_bytes(), bytes.size());
}

TEST(CoordinatorServiceTest, WholeJobWithWorkersAndAFakeParameterServer) {
  Cluster cluster;
  v1::RegisterParameterServerRequest shard;
  shard.set_address(cluster.ps_address());
  shard.set_shard_index(-1);
  v1::RegisterParameterServerResponse shard_reply;
  ASSERT_TRUE(cluster.stub().RegisterParameterServer(Context().get(), shard, &shard_reply).ok());
  EXPECT_EQ(shard_reply.shard_index(), 0u);
  EXPECT_EQ(shard_reply.expected_shards(), 1u);

  v1::RegisterWorkerResponse a;
  v1::RegisterWorkerResponse b;
  ASSERT_TRUE(cluster.stub().RegisterWorker(Context().get(), WorkerOn("node-a", 7001), &a).ok());
  ASSERT_TRUE(cluster.stub().RegisterWorker(Context().get(), WorkerOn("node-b", 7002), &b).ok());
  EXPECT_FALSE(a.has_assignment()) << "no job yet";
  EXPECT_EQ(a.heartbeat_interval_ms(), 100u);

  v1::Job job;
  ASSERT_TRUE(Submit(cluster,
                     R"({"spec": {"name": "e2e", "dataset": {"format": "SYNTHETIC"},
                                  "nodesMin": 2, "nodesMax": 2, "replicasPerWorker": 2}})",
                     &job)
                  .ok());
  const v1::Assignment assignment_a = AwaitAssignment(cluster, a.worker_id());
  const v1::Assignment assignment_b = AwaitAssignment(cluster, b.worker_id());
  EXPECT_EQ(assignment_a.generation(), 1u);
  EXPECT_EQ(assignment_a.world_size(), 2u);
  EXPECT_EQ(assignment_b.node_rank(), 1u);
  EXPECT_EQ(assignment_b.first_replica(), 2u);
  EXPECT_EQ(assignment_b.total_replicas(), 4u);
  ASSERT_EQ(assignment_a.shards_size(), 1);
  EXPECT_EQ(assignment_a.shards(0).address(), cluster.ps_address());
  // The shard heard of the generation before the workers (and refused it, holding no
  // job: the workers' InitPartitions installs the job at their generation).
  ASSERT_EQ(cluster.ps().begun().size(), 1u);
  EXPECT_EQ(cluster.ps().begun()[0].generation(), 1u);
  EXPECT_EQ(cluster.ps().begun()[0].num_nodes(), 2u);
  EXPECT_EQ(cluster.ps().begun()[0].job_id(), job.job_id());
  cluster.ps().Install(job.job_id(), assignment_a.generation(), assignment_a.num_nodes(),
                       assignment_a.resume_step());
  EXPECT_EQ(cluster.ps().generation(), 1u);

  // Rendezvous over gRPC: several waiters on node a's id, one publisher.
  const std::string rendezvous = assignment_a.rendezvous_id();
  std::vector<std::thread> waiters;
  std::atomic<int> answered{0};
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      v1::WaitRendezvousRequest wait;
      wait.set_rendezvous_id(rendezvous);
      wait.add_keys("nccl_id");
      wait.add_keys("rank1");
      wait.set_timeout_ms(30000);
      v1::WaitRendezvousResponse values;
      const grpc::Status status = cluster.stub().WaitRendezvous(Context().get(), wait, &values);
      EXPECT_TRUE(status.ok()) << status.error_message();
      ASSERT_EQ(values.values_size(), 2);
      EXPECT_EQ(values.values(0), "unique-id-bytes");
      EXPECT_EQ(values.values(1), "r1");
      ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return cluster.coordinator().rendezvous().stats().waiting == 4; }));
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"nccl_id", "unique-id-bytes"}, {"rank1", "r1"}}) {
    v1::PublishRendezvousRequest publish;
    publish.set_rendezvous_id(rendezvous);
    publish.set_key(key);
    publish.set_value(value);
    v1::PublishRendezvousResponse published;
    ASSERT_TRUE(cluster.stub().PublishRendezvous(Context().get(), publish, &published).ok());
  }
  for (std::thread& waiter : waiters) waiter.join();
  EXPECT_EQ(answered.load(), 4);

  // Other node's key space is separate; a missing key times out naming it.
  v1::WaitRendezvousRequest other;
  other.set_rendezvous_id(assignment_b.rendezvous_id());
  other.add_keys("nccl_id");
  other.set_timeout_ms(50);
  v1::WaitRendezvousResponse none;
  grpc::Status timed_out = cluster.stub().WaitRendezvous(Context().get(), other, &none);
  EXPECT_EQ(timed_out.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(timed_out.error_message(), HasSubstr("nccl_id"));
  // A value over --rendezvous_max_value_bytes.
  v1::PublishRendezvousRequest big;
  big.set_rendezvous_id(rendezvous);
  big.set_key("big");
  big.set_value(std::string(2048, 'x'));
  v1::PublishRendezvousResponse published;
  grpc::Status too_big = cluster.stub().PublishRendezvous(Context().get(), big, &published);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_big.error_message(), HasSubstr("2048 bytes"));
  // A client that gives up first: the server drops its wait.
  other.set_timeout_ms(600000);
  grpc::ClientContext short_context;
  short_context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  EXPECT_EQ(cluster.stub().WaitRendezvous(&short_context, other, &none).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(Eventually([&] {
    return cluster.coordinator().rendezvous().stats().waits_cancelled == 1 &&
           cluster.coordinator().rendezvous().stats().waiting == 0;
  }));

  // Training, then completion.
  Beat(cluster, a.worker_id(), 1, v1::WORKER_TRAINING, 0);
  Beat(cluster, b.worker_id(), 1, v1::WORKER_TRAINING, 0);
  for (uint64_t step = 1; step <= 20; ++step) {
    Beat(cluster, a.worker_id(), 1, v1::WORKER_TRAINING, step);
    Beat(cluster, b.worker_id(), 1, v1::WORKER_TRAINING, step);
  }
  cluster.ps().SetTraffic(20, 123456, 654321, 0.004);
  v1::Job running;
  ASSERT_TRUE(cluster.stub().GetJob(Context().get(), v1::GetJobRequest(), &running).ok());
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_EQ(running.step(), 20u);
  EXPECT_GT(running.progress_size(), 10);

  // The dashboard's JSON, polled until the shard's traffic shows.
  httplib::Client http("127.0.0.1", cluster.http_port());
  v1::ClusterStatus status;
  ASSERT_TRUE(Eventually([&] {
    auto response = http.Get("/api/v1/status");
    if (!response || response->status != 200) return false;
    status.Clear();
    if (!google::protobuf::util::JsonStringToMessage(response->body, &status).ok()) return false;
    return status.shards_size() == 1 && status.shards(0).bytes_in() == 123456;
  }));
  EXPECT_EQ(status.coordinator_version(), "test-version");
  EXPECT_EQ(status.job().state(), v1::RUNNING);
  EXPECT_EQ(status.generation(), 1u);
  // The generation gauge while it runs (it drops to 0 once the job has ended).
  ASSERT_TRUE(Eventually([&] {
    auto response = http.Get("/metrics");
    if (!response || response->status != 200) return false;
    absl::StatusOr<tributary::testing::ParsedMetrics> parsed =
        tributary::testing::ParsePrometheusText(response->body);
    return parsed.ok() && parsed->Sum("tributary_coordinator_generation") == 1;
  })) << "tributary_coordinator_generation never showed generation 1";
  ASSERT_EQ(status.nodes_size(), 2);
  EXPECT_EQ(status.nodes(1).node_name(), "node-b");
  EXPECT_EQ(status.nodes(1).workers(0).worker_id(), b.worker_id());
  EXPECT_TRUE(status.shards(0).reachable());
  EXPECT_DOUBLE_EQ(status.shards(0).aggregation_wait_seconds(), 0.004);
  auto page = http.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("/api/v1/status"));
  EXPECT_EQ(page->body.find("http://"), std::string::npos) << "no external assets";
  EXPECT_EQ(page->body.find("https://"), std::string::npos) << "no external assets";

  Beat(cluster, a.worker_id(), 1, v1::WORKER_FINISHED, 20);
  const v1::HeartbeatResponse last = Beat(cluster, b.worker_id(), 1, v1::WORKER_FINISHED, 20);
  EXPECT_EQ(last.action(), v1::ACTION_STOP);
  v1::Job done;
  ASSERT_TRUE(cluster.stub().GetJob(Context().get(), v1::GetJobRequest(), &done).ok());
  EXPECT_EQ(done.state(), v1::COMPLETED);
  EXPECT_FLOAT_EQ(done.result().test_accuracy(), 0.8f);
  EXPECT_EQ(done.result().bytes_pushed(), 2u << 20)
      << "the job's own traffic, from the workers' counts (not the shard's 123456)";
  EXPECT_EQ(done.result().bytes_pulled(), 4u << 20);
  EXPECT_EQ(done.result().steps(), 20u);

  // Its per-step history, over gRPC and on the dashboard's routes.
  v1::GetJobHistoryRequest history_request;
  history_request.set_job_id(job.job_id());
  v1::JobHistory history;
  const grpc::Status got_history =
      cluster.stub().GetJobHistory(Context().get(), history_request, &history);
  ASSERT_TRUE(got_history.ok()) << got_history.error_message();
  EXPECT_EQ(history.steps_size(), 20);
  EXPECT_EQ(history.workers_size(), 2);
  EXPECT_EQ(history.bytes_pushed(), 2u << 20);
  auto history_json = http.Get(absl::StrCat("/api/v1/jobs/", job.job_id(), "/history"));
  ASSERT_TRUE(history_json);
  EXPECT_EQ(history_json->status, 200);
  v1::JobHistory served;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(history_json->body, &served).ok());
  EXPECT_EQ(served.SerializeAsString(), history.SerializeAsString());
  auto jobs_json = http.Get("/api/v1/jobs");
  ASSERT_TRUE(jobs_json);
  v1::ListJobsResponse listed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(jobs_json->body, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).job_id(), job.job_id());
  EXPECT_EQ(listed.jobs(0).events_size(), 0) << "the list is for picking a job";
  auto job_json = http.Get(absl::StrCat("/api/v1/jobs/", job.job_id()));
  ASSERT_TRUE(job_json);
  v1::Job served_job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(job_json->body, &served_job).ok());
  EXPECT_EQ(served_job.state(), v1::COMPLETED);
  EXPECT_GT(served_job.events_size(), 2);
  auto unknown = http.Get("/api/v1/jobs/job-404-0000/history");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_THAT(unknown->body, HasSubstr("unknown job id 'job-404-0000'"));
  auto not_an_id = http.Get("/api/v1/jobs/..%2F..%2Fetc/history");
  ASSERT_TRUE(not_an_id);
  EXPECT_EQ(not_an_id->status, 404);
  EXPECT_TRUE(Eventually([&] { return cluster.ps().ended().size() == 1; }))
      << "the shard is told the job ended";
  EXPECT_EQ(cluster.ps().ended()[0], job.job_id());

  // /metrics parses and counts what happened.
  absl::StatusOr<tributary::testing::ParsedMetrics> metrics;
  ASSERT_TRUE(Eventually([&] {
    auto response = http.Get("/metrics");
    if (!response) return false;
    metrics = tributary::testing::ParsePrometheusText(response->body);
    return metrics.ok() && metrics->Sum("tributary_coordinator_job_state", "COMPLETED") == 1;
  })) << (metrics.ok() ? "" : metrics.status().ToString());
  EXPECT_GE(metrics->Sum("tributary_rpc_total",
                         "code=\"OK\",method=\"/tributary.v1.Coordinator/Heartbeat\""),
            40);
  EXPECT_GE(metrics->Sum("tributary_rpc_total", "code=\"INVALID_ARGUMENT"), 1);
  EXPECT_EQ(metrics->Sum("tributary_coordinator_rendezvous_waits_total", "result=\"ok\""), 4);
  EXPECT_GE(metrics->Sum("tributary_coordinator_rendezvous_waits_total", "deadline_exceeded"), 1);
  EXPECT_EQ(metrics->Sum("tributary_coordinator_rendezvous_waits_total", "cancelled"), 1);
  EXPECT_EQ(metrics->Sum("tributary_coordinator_generations_formed_total"), 1);
  EXPECT_EQ(metrics->Sum("tributary_coordinator_generation"), 0) << "no generation after the end";
  EXPECT_EQ(metrics->types.at("tributary_coordinator_generation"), "gauge");
  EXPECT_EQ(metrics->Sum("tributary_coordinator_workers", "WORKER_FINISHED"), 2);
  EXPECT_EQ(metrics->samples.count(absl::StrCat(
                "tributary_coordinator_heartbeat_age_seconds{node=\"node-a\",worker=\"",
                a.worker_id(), "\"}")),
            1u);
  EXPECT_EQ(metrics->types.at("tributary_coordinator_heartbeat_age_seconds"), "gauge");
}

TEST(CoordinatorServiceTest, WorkerErrorsAnswerWithTheRightCodes) {
  Cluster cluster;
  v1::RegisterWorkerRequest nameless = WorkerOn("", 1);
  v1::RegisterWorkerResponse reply;
  const grpc::Status invalid = cluster.stub().RegisterWorker(Context().get(), nameless, &reply);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(invalid.error_message(), HasSubstr("node_name"));
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w99-gone");
  v1::HeartbeatResponse answer;
  const grpc::Status unknown = cluster.stub().Heartbeat(Context().get(), beat, &answer);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("register again"));
  v1::DeregisterRequest leave;
  leave.set_worker_id("w99-gone");
  v1::DeregisterResponse left;
  EXPECT_EQ(cluster.stub().Deregister(Context().get(), leave, &left).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::WaitRendezvousRequest wait;
  wait.set_rendezvous_id("no-such-id");
  wait.add_keys("k");
  v1::WaitRendezvousResponse values;
  EXPECT_EQ(cluster.stub().WaitRendezvous(Context().get(), wait, &values).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace tributary::coordinator
