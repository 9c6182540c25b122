// PsClient against a real PS shard served in-process over gRPC: InitPartitions and
// PullAll wait out a shard that starts late or restarts (UNAVAILABLE is retried with
// backoff, within a budget), give up with a clear error when it never comes, and
// never retry a refusal (FAILED_PRECONDITION).
#include "worker/comm/ps_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/data_plane_wire.h"
#include "common/shared_region.h"
#include "services/parameter_server/shard_test_util.h"
#include "services/parameter_server/testing/in_process_shard.h"

namespace tributary::worker {
namespace {

using ::testing::HasSubstr;
using ps::testing::InProcessShard;

constexpr int64_t kElements = 320;  // Five partitions of 64 floats (partition_bytes 256).

struct Job {
  Job(const std::string& id = "job-1") {
    spec = ps::testing::MakeSpec(v1::SYNC, ps::testing::Sgd(0.1f), 1);
    plan = ps::testing::MakeHeader(spec, kElements, 1, 0, id).plan();
    identity.job_id = id;
    identity.generation = 1;
    for (int64_t i = 0; i < kElements; ++i) initial.push_back(0.25f - 0.001f * i);
  }

  std::unique_ptr<PsClient> Client(const InProcessShard& shard, absl::Duration budget,
                                   PsTransport transport = PsTransport::kAuto,
                                   std::shared_ptr<SharedRegion> node_region = nullptr) const {
    return std::make_unique<PsClient>(identity, plan, std::vector<v1::ShardInfo>{shard.info(0)},
                                      ChannelOptions(), v1::SYNC, v1::FLOAT32, budget,
                                      /*streams_per_shard=*/1, transport,
                                      /*shared_memory=*/true, std::move(node_region));
  }

  v1::JobSpec spec;
  v1::PartitionPlan plan;
  PsIdentity identity;
  std::vector<float> initial;
};

// A port nothing listens on any more: a shard started there and stopped.
int FreePort(InProcessShard& shard) {
  EXPECT_TRUE(shard.Start().ok());
  const int port = shard.port();
  shard.Stop();
  return port;
}

// Starts `shard` on `port` once `client` has retried at least once (so the test does
// not depend on how fast anything runs).
std::thread StartAfterARetry(InProcessShard& shard, int port, const PsClient& client) {
  return std::thread([&shard, port, &client] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (client.rpc_retries() == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(shard.Start(port).ok());
  });
}

TEST(PsClientRetryTest, InitAndPullWaitForAShardThatStartsLate) {
  const Job job;
  InProcessShard shard;
  const int port = FreePort(shard);
  auto client = job.Client(shard, absl::Seconds(30));
  std::thread late = StartAfterARetry(shard, port, *client);
  absl::StatusOr<uint64_t> installed = client->InitPartitions(job.spec, 100, job.initial.data());
  late.join();
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(*installed, 0u);
  EXPECT_GE(client->rpc_retries(), 1);

  std::vector<float> pulled(kElements, -1.0f);
  absl::StatusOr<uint64_t> step = client->PullAll(pulled.data());
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 0u);
  EXPECT_EQ(pulled, job.initial);
}

TEST(PsClientRetryTest, PullWaitsForAShardThatRestartsFromItsCheckpoint) {
  const Job job;
  InProcessShard shard(ps::testing::FreshTempDir("restart"));
  ASSERT_TRUE(shard.Start().ok());
  auto client = job.Client(shard, absl::Seconds(30));
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(shard.shard().Checkpoint().ok());
  const int port = shard.port();
  shard.Stop();  // A crash: only the checkpoint survives.

  std::thread restart = StartAfterARetry(shard, port, *client);
  std::vector<float> pulled(kElements, -1.0f);
  absl::StatusOr<uint64_t> step = client->PullAll(pulled.data());
  restart.join();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_GE(client->rpc_retries(), 1);
  EXPECT_EQ(*step, 0u);
  EXPECT_EQ(pulled, job.initial);
}

TEST(PsClientRetryTest, GivesUpAfterTheBudgetNamingTheShard) {
  const Job job;
  InProcessShard shard;
  const int port = FreePort(shard);
  auto client = job.Client(shard, absl::Milliseconds(700));
  absl::StatusOr<uint64_t> installed = client->InitPartitions(job.spec, 100, job.initial.data());
  ASSERT_FALSE(installed.ok());
  EXPECT_EQ(installed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(installed.status().message(),
              HasSubstr(absl::StrCat("InitPartitions on PS shard 0 at 127.0.0.1:", port)));
  EXPECT_THAT(installed.status().message(), HasSubstr("gave up after"));
  EXPECT_GE(client->rpc_retries(), 1);

  std::vector<float> pulled(kElements);
  absl::StatusOr<uint64_t> step = client->PullAll(pulled.data());
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(step.status().message(), HasSubstr("Pull from PS shard 0"));
}

TEST(PsClientRetryTest, ARefusalIsNeverRetried) {
  InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  const Job installed("job-a");
  ASSERT_TRUE(installed.Client(shard, absl::Seconds(30))
                  ->InitPartitions(installed.spec, 100, installed.initial.data())
                  .ok());

  // Another job: the shard refuses, and asking again would not change its answer.
  const Job other("job-b");
  auto client = other.Client(shard, absl::Seconds(30));
  absl::StatusOr<uint64_t> init = client->InitPartitions(other.spec, 100, other.initial.data());
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.status().code(), absl::StatusCode::kFailedPrecondition) << init.status();
  EXPECT_THAT(init.status().message(), HasSubstr("holds job 'job-a'"));
  std::vector<float> pulled(kElements);
  absl::StatusOr<uint64_t> step = client->PullAll(pulled.data());
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_EQ(client->rpc_retries(), 0);
}


// A job installed at generation 0 (the one a shard forms for an InitPartitions outside
// any generation), so that its pushes are accepted.
Job TrainingJob() {
  Job job;
  job.identity.generation = 0;
  return job;
}

// Trains `steps` SYNC steps through `client` (one node), pushing every partition
// last first and waiting first first, as a node leader does; `expect`: announce every
// update's destination (ExpectUpdateInto), as the training session does. `grad_at`:
// where the gradients are written and pushed from (null: a buffer of its own).
absl::Status Train(PsClient& client, const Job& job, int steps, bool expect, float* params_at,
                   uint64_t first_step = 0, float* grad_at = nullptr) {
  std::vector<float> own(grad_at == nullptr ? kElements : 0);
  float* grad = grad_at != nullptr ? grad_at : own.data();
  float* params = params_at;
  for (uint64_t step = first_step; step < first_step + steps; ++step) {
    for (int64_t i = 0; i < kElements; ++i) {
      grad[i] = 0.01f * static_cast<float>((i * 7 + step * 3) % 11) - 0.05f;
    }
    for (int p = job.plan.partitions_size() - 1; p >= 0; --p) {
      const v1::Partition& partition = job.plan.partitions(p);
      if (expect) client.ExpectUpdateInto(partition.id(), step, params + partition.offset());
      absl::Status pushed = client.Push(step, partition.id(), grad + partition.offset(), 1, 1);
      if (!pushed.ok()) return pushed;
    }
    for (const v1::Partition& partition : job.plan.partitions()) {
      absl::Status updated = client.WaitUpdated(partition.id(), step, absl::Seconds(60),
                                                params + partition.offset());
      if (!updated.ok()) return updated;
    }
  }
  return absl::OkStatus();
}

// The TCP data plane and gRPC PushPull carry the same messages: the same pushes give
// the same parameters bit for bit, whether updates are received into the parameters
// (ExpectUpdateInto) or kept and copied.
TEST(PsClientTransportTest, TcpLocalAndGrpcGiveTheSameParameters) {
  std::vector<std::vector<float>> results;
  for (const auto& [transport, expect] : std::vector<std::pair<PsTransport, bool>>{
           {PsTransport::kTcp, true},
           {PsTransport::kTcp, false},
           {PsTransport::kGrpc, true},
           {PsTransport::kLocal, true},
           {PsTransport::kAuto, true}}) {
    const Job job = TrainingJob();
    InProcessShard shard;
    ASSERT_TRUE(shard.Start().ok());
    auto client = job.Client(shard, absl::Seconds(30), transport);
    ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
    ASSERT_TRUE(client->Open().ok());
    std::vector<float> params = job.initial;
    ASSERT_TRUE(Train(*client, job, 6, expect, params.data()).ok());
    EXPECT_EQ(client->tcp_lanes(), transport == PsTransport::kGrpc ? 0 : 1);
    // The shard is in this process's network namespace: auto takes its local socket.
    EXPECT_EQ(client->local_lanes(),
              transport == PsTransport::kLocal || transport == PsTransport::kAuto ? 1 : 0);
    // Every update of a data-plane run that announced its destination went straight there.
    const bool direct = transport != PsTransport::kGrpc && expect;
    EXPECT_EQ(client->direct_updates(), direct ? 6u * job.plan.partitions_size() : 0u);
    EXPECT_EQ(client->bytes_pulled(), 6u * kElements * sizeof(float));
    EXPECT_EQ(client->in_place_updates(), 0u) << "no node region: copied out of a slot";
    client->Close();
    results.push_back(params);
  }
  EXPECT_NE(results[0], std::vector<float>(Job().initial));
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[0], results[i]) << i;

  // The node's region (TrainingSession on a node of one CPU replica): the parameters
  // and the gradients live in memory the lane hands the shard, pushes go out from
  // there and the shard writes every update into the parameters itself; the same
  // parameters, bit for bit.
  const Job job = TrainingJob();
  InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  absl::StatusOr<SharedRegion> made = SharedRegion::Create(2 * kElements * sizeof(float));
  ASSERT_TRUE(made.ok()) << made.status();
  auto node = std::make_shared<SharedRegion>(*std::move(made));
  float* params = reinterpret_cast<float*>(node->data());
  float* grads = params + kElements;
  std::copy(job.initial.begin(), job.initial.end(), params);
  auto client = job.Client(shard, absl::Seconds(30), PsTransport::kLocal, node);
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, params).ok());
  ASSERT_TRUE(client->Open().ok());
  ASSERT_TRUE(Train(*client, job, 6, true, params, 0, grads).ok());
  EXPECT_EQ(client->shared_lanes(), 1);
  EXPECT_EQ(client->in_place_updates(), 6u * job.plan.partitions_size());
  client->Close();
  EXPECT_EQ(std::vector<float>(params, params + kElements), results[0]);
}

// A shard that cannot give what `only` asks for: `auto` trains on what it offers
// (`tcp_lanes` data-plane lanes, none on a local socket), and `only` fails the client
// with FAILED_PRECONDITION saying `why`.
void AutoTrainsAndOnlyIsRefused(InProcessShard& shard, int tcp_lanes, PsTransport only,
                                const std::string& why) {
  const Job job = TrainingJob();
  auto client = job.Client(shard, absl::Seconds(30), PsTransport::kAuto);
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(client->Open().ok());
  std::vector<float> params = job.initial;
  ASSERT_TRUE(Train(*client, job, 2, true, params.data()).ok());
  EXPECT_EQ(client->tcp_lanes(), tcp_lanes);
  EXPECT_EQ(client->local_lanes(), 0);
  client->Close();

  auto refused = job.Client(shard, absl::Seconds(30), only);
  absl::Status opened = refused->Open();
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.code(), absl::StatusCode::kFailedPrecondition) << opened;
  EXPECT_THAT(opened.message(), HasSubstr(why));
}

// A shard that serves no local socket: auto uses its TCP port, local says why not.
TEST(PsClientTransportTest, LocalNeedsTheShardsLocalSocket) {
  InProcessShard shard;
  ps::DataPlaneOptions options;
  options.local_socket = false;
  shard.set_data_plane_options(options);
  ASSERT_TRUE(shard.Start().ok());
  AutoTrainsAndOnlyIsRefused(shard, 1, PsTransport::kLocal, "announced no local socket");
}

// Plays the shard's gRPC side: OpenDataPlane answers with the real shard's ticket and
// data port, but with `local_socket` naming a socket someone else listens on.
class RedirectingFront : public v1::ParameterServer::Service {
 public:
  explicit RedirectingFront(ps::DataPlaneServer* real) : real_(real) {}
  grpc::Status OpenDataPlane(grpc::ServerContext*, const v1::OpenDataPlaneRequest* request,
                             v1::OpenDataPlaneResponse* response) override {
    absl::StatusOr<v1::OpenDataPlaneResponse> issued =
        real_->Issue(request->job_id(), request->generation(), request->node_rank());
    if (!issued.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no ticket");
    *response = *issued;
    absl::MutexLock lock(&mu_);
    response->set_local_socket(local_);
    tickets_.push_back(issued->ticket());
    return grpc::Status::OK;
  }
  void set_local(const std::string& name) {
    absl::MutexLock lock(&mu_);
    local_ = name;
  }
  std::vector<std::string> tickets() {
    absl::MutexLock lock(&mu_);
    return tickets_;
  }

 private:
  ps::DataPlaneServer* const real_;
  absl::Mutex mu_;
  std::string local_;
  std::vector<std::string> tickets_;
};

// Listens at a fresh abstract name and answers one connection's request with what
// `answer` makes of it (a forged proof, or one relayed from the real shard), then keeps
// whatever it hears. Gives up after 30 s without a connection.
class Squatter {
 public:
  using Answer = std::function<std::string(const std::string& request)>;
  explicit Squatter(Answer answer) : answer_(std::move(answer)) {
    absl::StatusOr<int> fd = data_plane::ListenLocal(&name_);
    EXPECT_TRUE(fd.ok()) << fd.status();
    listener_ = fd.ok() ? *fd : -1;
    thread_ = std::thread([this] {
      pollfd waiting{listener_, POLLIN, 0};
      if (listener_ < 0 || ::poll(&waiting, 1, 30000) != 1) return;
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      data_plane::SetReceiveTimeout(fd, absl::Seconds(20));
      char buffer[256];
      ssize_t got = ::recv(fd, buffer, data_plane::kLocalRequestBytes, MSG_WAITALL);
      if (got > 0) heard_.append(buffer, got);
      const std::string reply = answer_(heard_);
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      while ((got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) heard_.append(buffer, got);
      ::close(fd);
    });
  }
  ~Squatter() {
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) ::close(listener_);
  }
  const std::string& name() const { return name_; }
  // What it heard, once the worker closed the connection.
  const std::string& Heard() {
    thread_.join();
    return heard_;
  }

 private:
  const Answer answer_;
  std::string name_;
  int listener_ = -1;
  std::string heard_;
  std::thread thread_;
};

// The real shard's answer to `request`, from its local socket: what an accomplice in
// the shard's network namespace could relay to a squatter elsewhere.
std::string RelayedProof(const std::string& shard_socket, const std::string& request) {
  absl::StatusOr<int> fd = data_plane::ConnectLocal(shard_socket, absl::Seconds(5));
  if (!fd.ok()) return "";
  iovec piece = {const_cast<char*>(request.data()), request.size()};
  std::string proof(data_plane::kDigestBytes, '\0');
  data_plane::SetReceiveTimeout(*fd, absl::Seconds(20));
  if (!data_plane::WriteAll(*fd, &piece, 1, "relay").ok() ||
      !data_plane::ReadFull(*fd, proof.data(), proof.size(), "relay").ok()) {
    proof.clear();
  }
  ::close(*fd);
  return proof;
}

// An abstract name is no one's property: a process on another host (or in another
// network namespace) may listen at the name a shard announced. The worker sends its
// ticket only after the listener proved it issued it, from the worker's own network
// namespace. A squatter that cannot (a forged proof; one keyed by the public digest;
// the real shard's proof relayed from another namespace) gets the ticket's digest and
// a challenge, never the ticket: `auto` then connects over TCP and `local` fails,
// naming the wrong proof. The same relay in the worker's own namespace does get the
// ticket (the test would notice a check that does nothing).
TEST(PsClientTransportTest, ASquatterAtTheLocalNameNeverSeesTheTicket) {
  InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  const std::string shard_socket = shard.data_plane()->local_socket();
  ASSERT_FALSE(shard_socket.empty());
  RedirectingFront front(shard.data_plane());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&front);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  PsIdentity identity;
  identity.job_id = "job-1";
  identity.generation = 1;
  TcpLane::Target target;
  target.stub = stub.get();
  target.address = address;
  target.name = "the front";
  target.identity = &identity;
  target.max_values_frame = 1 << 20;
  target.send_timeout = absl::Seconds(10);

  const Squatter::Answer forged = [](const std::string&) {
    return std::string(data_plane::kDigestBytes, '\x5a');
  };
  const Squatter::Answer keyed_by_digest = [](const std::string& request) {
    return data_plane::LocalProof(request.substr(4, 32), request.substr(36, 32),
                                  data_plane::LocalNamespaceId());
  };
  const Squatter::Answer relayed = [&shard_socket](const std::string& request) {
    return RelayedProof(shard_socket, request);
  };
  struct Case {
    const char* what;
    Squatter::Answer answer;
    TcpLane::Local local;
    std::string namespace_id;  // The worker's; empty: this process's.
  };
  const std::vector<Case> cases = {
      {"forged, auto", forged, TcpLane::Local::kFirst, ""},
      {"forged, local", forged, TcpLane::Local::kOnly, ""},
      {"keyed by the digest", keyed_by_digest, TcpLane::Local::kFirst, ""},
      {"relayed to a worker on another host", relayed, TcpLane::Local::kFirst,
       "another-boot-id/1:4026531840"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Squatter squatter(c.answer);
    front.set_local(squatter.name());
    target.local = c.local;
    target.namespace_id = c.namespace_id;
    ConnectAbort abort;
    DataPlaneTrouble trouble;
    absl::StatusOr<std::unique_ptr<TcpLane>> lane =
        TcpLane::Connect(target, abort, nullptr, &trouble);
    if (c.local == TcpLane::Local::kFirst) {
      ASSERT_TRUE(lane.ok()) << lane.status();
      EXPECT_FALSE((*lane)->is_local()) << "the squatter's socket was taken";
      lane->reset();
    } else {
      ASSERT_FALSE(lane.ok());
      EXPECT_EQ(lane.status().code(), absl::StatusCode::kUnavailable);
      EXPECT_THAT(lane.status().message(), HasSubstr("wrong proof"));
    }
    const std::string ticket = front.tickets().back();
    const std::string& heard = squatter.Heard();
    ASSERT_EQ(heard.size(), data_plane::kLocalRequestBytes) << "only the request, nothing after";
    EXPECT_EQ(heard.substr(0, 4), "TRDL");
    EXPECT_EQ(heard.substr(4, 32), data_plane::TicketDigest(ticket));
    EXPECT_EQ(heard.find(ticket), std::string::npos);
  }

  // The control: the relay, for a worker in the shard's own namespace, passes the
  // check, and the worker sends the hello with its ticket.
  Squatter relay(relayed);
  front.set_local(relay.name());
  target.local = TcpLane::Local::kFirst;
  target.namespace_id = "";
  ConnectAbort abort;
  DataPlaneTrouble trouble;
  absl::StatusOr<std::unique_ptr<TcpLane>> lane =
      TcpLane::Connect(target, abort, nullptr, &trouble);
  EXPECT_FALSE(lane.ok()) << "the relay closes after the hello";
  const std::string ticket = front.tickets().back();
  EXPECT_NE(relay.Heard().find(ticket), std::string::npos);
  EXPECT_EQ(front.tickets().size(), cases.size() + 1);
  server->Shutdown();
}

// Auto speaks gRPC; asked for the data plane only, the client says why it cannot have it.
TEST(PsClientTransportTest, AutoUsesGrpcWhenTheShardRunsNoDataPlane) {
  InProcessShard shard("", /*data_plane=*/false);
  ASSERT_TRUE(shard.Start().ok());
  AutoTrainsAndOnlyIsRefused(shard, 0, PsTransport::kTcp, "runs no TCP data plane");
}

// A shard that restarts from its checkpoint mid-job: the client gets a new ticket,
// connects to the new data port and sends again what still awaits its update.
TEST(PsClientTransportTest, ReconnectsToARestartedShardOverTcp) {
  const Job job = TrainingJob();
  InProcessShard shard(ps::testing::FreshTempDir("tcp-restart"));
  ASSERT_TRUE(shard.Start().ok());
  auto client = job.Client(shard, absl::Seconds(30), PsTransport::kTcp);
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(client->Open().ok());
  std::vector<float> params = job.initial;
  ASSERT_TRUE(Train(*client, job, 2, true, params.data()).ok());
  // The client holds every update of step 1; the shard counts a partition's step as done
  // a moment after it sent the update. Checkpointed before that, the checkpoint would be
  // the (consistent) one of step 1 and the restarted shard would wait for step 1 again.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (shard.shard().Status().step() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(shard.shard().Status().step(), 2u);
  ASSERT_TRUE(shard.shard().Checkpoint().ok());
  const int port = shard.port();
  shard.Stop();
  std::thread restart([&shard, port] {
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_TRUE(shard.Start(port).ok());
  });
  ASSERT_TRUE(Train(*client, job, 2, true, params.data(), /*first_step=*/2).ok());
  restart.join();
  EXPECT_GE(client->reconnects(), 1);
  EXPECT_EQ(client->tcp_lanes(), 1);
  client->Close();

  // The same four steps without a restart.
  InProcessShard steady;
  ASSERT_TRUE(steady.Start().ok());
  auto reference = job.Client(steady, absl::Seconds(30), PsTransport::kGrpc);
  ASSERT_TRUE(reference->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(reference->Open().ok());
  std::vector<float> expected = job.initial;
  ASSERT_TRUE(Train(*reference, job, 4, false, expected.data()).ok());
  EXPECT_EQ(params, expected);
}

// `auto` falls back to gRPC when the data port fails it (here: every ticket taken, as a
// flood of OpenDataPlane would), and moves back to the data plane once it answers
// again: a node is not pushed off the data plane for the rest of its job.
TEST(PsClientTransportTest, AStreamThatFellBackReturnsToTheDataPlane) {
  const Job job = TrainingJob();
  InProcessShard shard;
  ps::DataPlaneOptions options;
  options.max_tickets = 4;
  options.ticket_lifetime = absl::Milliseconds(1500);
  shard.set_data_plane_options(options);
  ASSERT_TRUE(shard.Start().ok());
  for (uint32_t node = 0; node < 4; ++node) {
    ASSERT_TRUE(shard.data_plane()->Issue("another-job", 1, node).ok());
  }
  auto client = job.Client(shard, absl::Seconds(30), PsTransport::kAuto);
  client->set_data_plane_retry(absl::Milliseconds(200));
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(client->Open().ok());
  EXPECT_EQ(client->tcp_lanes(), 0) << "no ticket to be had: gRPC";
  std::vector<float> params = job.initial;
  uint64_t step = 0;
  ASSERT_TRUE(Train(*client, job, 2, true, params.data(), step).ok());
  step += 2;
  // The taken tickets expire; the stream tries again (200 ms, 400 ms, ...) and moves,
  // while training goes on.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (client->tcp_lanes() == 0 && absl::Now() < give_up) {
    ASSERT_TRUE(Train(*client, job, 1, true, params.data(), step).ok());
    ++step;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(client->tcp_lanes(), 1) << "still on gRPC after 30 s";
  ASSERT_TRUE(Train(*client, job, 2, true, params.data(), step).ok());
  step += 2;
  EXPECT_GT(client->direct_updates(), 0u) << "updates arrive on the data plane";
  client->Close();

  // The same steps on gRPC alone.
  InProcessShard steady;
  ASSERT_TRUE(steady.Start().ok());
  auto reference = job.Client(steady, absl::Seconds(30), PsTransport::kGrpc);
  ASSERT_TRUE(reference->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(reference->Open().ok());
  std::vector<float> expected = job.initial;
  ASSERT_TRUE(Train(*reference, job, static_cast<int>(step), false, expected.data()).ok());
  EXPECT_EQ(params, expected);
}

// An update received straight into its destination counts even when the session is
// interrupted before WaitUpdated asks for it (as any update that arrived does).
TEST(PsClientTransportTest, AnUpdateReceivedIntoItsDestinationSurvivesAnInterrupt) {
  const Job job = TrainingJob();
  InProcessShard shard;
  ASSERT_TRUE(shard.Start().ok());
  auto client = job.Client(shard, absl::Seconds(30), PsTransport::kTcp);
  ASSERT_TRUE(client->InitPartitions(job.spec, 100, job.initial.data()).ok());
  ASSERT_TRUE(client->Open().ok());
  std::vector<float> params = job.initial;
  std::vector<float> grad(kElements, 0.5f);
  const v1::Partition& partition = job.plan.partitions(0);
  client->ExpectUpdateInto(partition.id(), 0, params.data() + partition.offset());
  ASSERT_TRUE(client->Push(0, partition.id(), grad.data() + partition.offset(), 1, 1).ok());
  for (int i = 0; i < 1000 && client->direct_updates() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(client->direct_updates(), 1u);
  client->Interrupt("a new generation");
  absl::Status updated = client->WaitUpdated(partition.id(), 0, absl::Seconds(10),
                                             params.data() + partition.offset());
  EXPECT_TRUE(updated.ok()) << updated;
  // SGD at rate 0.1 over one sample.
  EXPECT_EQ(params[partition.offset()], job.initial[partition.offset()] - 0.1f * 0.5f);
  client->Close();
}

// A lane that carries nothing; it counts the shutdowns it was asked for.
class IdleLane : public PushPullLane {
 public:
  bool is_tcp() const override { return true; }
  bool Write(const PushHeader&, const char*, size_t, AnswerInto) override { return false; }
  LaneRead Read(ReceivedMessage&, PartitionValuesView&, absl::Status* status) override {
    *status = absl::UnavailableError("idle");
    return LaneRead::kEnded;
  }
  void Shutdown() override { ++shutdowns; }
  std::atomic<int> shutdowns{0};
};

// The lane side of a direct receive, played by hand: an update whose receive was
// already under way when the session was interrupted lands, Interrupt waits for it and
// cuts the lane, and WaitUpdated still gives it (it arrived), from where it landed.
TEST(PsClientExpectationTest, AnUpdateLandingWhileTheSessionIsInterruptedStillCounts) {
  const Job job = TrainingJob();
  v1::ShardInfo nowhere;  // Never opened: nothing connects.
  nowhere.set_shard_index(0);
  nowhere.set_address("127.0.0.1:1");
  PsClient client(job.identity, job.plan, {nowhere}, ChannelOptions(), v1::SYNC, v1::FLOAT32,
                  absl::Seconds(1), 1, PsTransport::kTcp);
  const v1::Partition& partition = job.plan.partitions(0);
  std::vector<float> params = job.initial;
  float* dst = params.data() + partition.offset();
  std::vector<float> grad(kElements, 0.5f);
  client.ExpectUpdateInto(partition.id(), 0, dst);
  ASSERT_TRUE(client.Push(0, partition.id(), grad.data() + partition.offset(), 1, 1).ok());
  PartitionValuesView head;
  head.partition_id = partition.id();
  head.dtype = v1::FLOAT32;
  head.step = 1;
  head.version = 1;
  const uint64_t bytes = static_cast<uint64_t>(partition.length()) * sizeof(float);
  IdleLane lane;
  DirectReceiver& receiver = client;
  ASSERT_EQ(receiver.Claim(lane, head, bytes), dst);
  std::fill(dst, dst + partition.length(), 7.0f);  // What the lane received there.
  std::thread interrupt([&client] { client.Interrupt("a new generation"); });
  while (lane.shutdowns.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  receiver.Landed(head, bytes, absl::OkStatus(), /*in_place=*/false);
  interrupt.join();
  // Not into an expectation any more: a second update is not claimed.
  EXPECT_EQ(receiver.Claim(lane, head, bytes), nullptr);
  std::vector<float> out(partition.length(), 0.0f);
  absl::Status updated = client.WaitUpdated(partition.id(), 0, absl::Seconds(1), out.data());
  ASSERT_TRUE(updated.ok()) << updated;
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[partition.length() - 1], 7.0f);
  client.Close();
}

}  // namespace
}  // namespace tributary::worker
