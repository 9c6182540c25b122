#include "tests/training/cluster_fixture.h"

#include <cmath>
#include <cstdlib>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "worker/engine/trainer.h"

namespace tributary::testing {

std::unique_ptr<cli::LocalCluster> StartCluster(const std::string& name,
                                                const ClusterShape& shape) {
  cli::LocalClusterOptions options;
  absl::Status found = cli::LocateBinaries("", "", options);
  EXPECT_TRUE(found.ok()) << found;
  options.ps_shards = shape.ps_shards;
  options.workers = shape.workers;
  options.nodes = shape.nodes;
  options.run_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  options.coordinator_args = {"--heartbeat_interval=200ms", "--heartbeat_timeout=3s",
                              "--settle_window=100ms", "--shard_poll_interval=500ms"};
  options.coordinator_args.insert(options.coordinator_args.end(),
                                  shape.coordinator_args.begin(), shape.coordinator_args.end());
  options.parameter_server_args = shape.ps_args;
  options.worker_args = {"--collective_timeout_seconds=5"};
  options.worker_args.insert(options.worker_args.end(), shape.worker_args.begin(),
                             shape.worker_args.end());
  options.stop_grace = absl::Seconds(5);
  auto cluster = std::make_unique<cli::LocalCluster>(options);
  absl::Status started = cluster->Start();
  EXPECT_TRUE(started.ok()) << started;
  return cluster;
}

absl::StatusOr<v1::Job> SubmitJob(cli::LocalCluster& cluster, const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  absl::Status status = FromGrpcStatus(
      v1::Coordinator::NewStub(cluster.coordinator_channel())->SubmitJob(&context, request, &job),
      "SubmitJob");
  if (!status.ok()) return status;
  return job;
}

v1::Job RunToTheEnd(cli::LocalCluster& cluster, const v1::JobSpec& spec) {
  absl::StatusOr<v1::Job> submitted = SubmitJob(cluster, spec);
  EXPECT_TRUE(submitted.ok()) << submitted.status();
  if (!submitted.ok()) return v1::Job();
  absl::StatusOr<v1::Job> job =
      WaitForJob(cluster, submitted->job_id(), Finished, absl::Minutes(3));
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::Job();
}

bool Finished(const v1::Job& job) {
  return job.state() == v1::COMPLETED || job.state() == v1::FAILED ||
         job.state() == v1::STOPPED;
}

absl::StatusOr<v1::Job> WaitForJob(cli::LocalCluster& cluster, const std::string& job_id,
                                   const std::function<bool(const v1::Job&)>& done,
                                   absl::Duration timeout) {
  auto stub = v1::Coordinator::NewStub(cluster.coordinator_channel());
  const absl::Time give_up = absl::Now() + timeout;
  v1::Job job;
  while (true) {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (stub->GetJob(&context, request, &job).ok() && done(job)) return job;
    if (absl::Status alive = cluster.CheckProcesses(); !alive.ok()) {
      return absl::UnavailableError(absl::StrCat("while waiting for ", job_id, ": ",
                                                 alive.message()));
    }
    if (absl::Now() > give_up) {
      std::string events;
      for (const v1::JobEvent& event : job.events()) {
        absl::StrAppend(&events, "\n  ", v1::JobState_Name(event.to_state()), ": ",
                        event.reason());
      }
      return absl::DeadlineExceededError(absl::StrCat(
          job_id, " still ", v1::JobState_Name(job.state()), " at step ", job.step(), "/",
          job.total_steps(), " after ", absl::FormatDuration(timeout), " (", job.state_reason(),
          ")", events));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<std::vector<v1::ShardStatus>> ShardStatuses(cli::LocalCluster& cluster) {
  std::vector<v1::ShardStatus> statuses;
  for (const std::string& address : cluster.shard_addresses()) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(address, cluster.channel_options());
    if (!channel.ok()) return channel.status();
    auto stub = v1::ParameterServer::NewStub(*channel);
    v1::ShardStatus status;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    absl::Status rpc = FromGrpcStatus(
        stub->GetShardStatus(&context, v1::GetShardStatusRequest(), &status),
        absl::StrCat("GetShardStatus at ", address));
    if (!rpc.ok()) return rpc;
    statuses.push_back(status);
  }
  return statuses;
}

absl::StatusOr<v1::Job> WaitForNodes(cli::LocalCluster& cluster, const std::string& job_id,
                                     uint32_t nodes, uint64_t min_step, absl::Duration timeout) {
  return WaitForJob(
      cluster, job_id,
      [&](const v1::Job& job) {
        if (job.step() < min_step) return false;
        absl::StatusOr<std::vector<v1::ShardStatus>> shards = ShardStatuses(cluster);
        if (!shards.ok()) return false;
        for (const v1::ShardStatus& shard : *shards) {
          if (shard.num_nodes() != nodes) return false;
        }
        return true;
      },
      timeout);
}

v1::JobSpec SyntheticJob(uint32_t batch, uint64_t steps) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.mutable_model()->set_name("mlp");
  for (uint32_t size : {32, 24, 16, 4}) spec.mutable_model()->add_layer_sizes(size);
  v1::DatasetSpec& data = *spec.mutable_dataset();
  data.set_format(v1::SYNTHETIC);
  data.set_synthetic_train_samples(2000);
  data.set_synthetic_test_samples(400);
  data.set_synthetic_features(32);
  data.set_synthetic_classes(4);
  spec.set_global_batch_size(batch);
  spec.set_max_steps(steps);
  spec.set_epochs(0);
  spec.mutable_optimizer()->set_type(v1::MOMENTUM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  spec.set_seed(7);
  return WithDefaults(spec);
}

std::vector<float> ReferenceParameters(const v1::JobSpec& spec, uint64_t steps) {
  engine::TrainerOptions options;
  options.replicas = 1;
  auto trainer = engine::LocalTrainer::Create(spec, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  for (uint64_t i = 0; i < steps; ++i) {
    auto step = (*trainer)->Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
  }
  return (*trainer)->parameters();
}

double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 0, worst = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(b[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return largest == 0 ? worst : worst / largest;
}

}  // namespace tributary::testing
