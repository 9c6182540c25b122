// The shard's TCP data plane from the outside, over real loopback sockets: a ticket
// admits one connection for one node, pushes on it train exactly as on gRPC
// PushPull, and every bad input (no or a used or expired ticket, a wrong hello, a
// frame of 2^64-1 bytes, garbage, a push for another node or a stale generation, a
// peer that never speaks, too many connections or tickets) ends that connection with
// a status naming the value while the shard keeps serving others.
#include "services/parameter_server/data_plane.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <prometheus/registry.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/data_plane_wire.h"
#include "common/partition_codec.h"
#include "common/shared_region.h"
#include "services/parameter_server/shard_test_util.h"

namespace tributary::ps {
namespace {

namespace dp = ::tributary::data_plane;
using ::testing::HasSubstr;
using testing::InitialValues;
using testing::MakeHeader;
using testing::MakePush;
using testing::MakeSpec;
using testing::Sgd;

constexpr int64_t kElements = 192;  // Three partitions of 64 floats (partition_bytes 256).

struct Fixture {
  explicit Fixture(DataPlaneOptions options = {}, uint32_t nodes = 1)
      : header(MakeHeader(MakeSpec(v1::SYNC, Sgd(0.5f), nodes), kElements, 1, 0)),
        shard(ShardOptions{}, nullptr),
        executor(2) {
    for (int64_t i = 0; i < kElements; ++i) initial.push_back(0.01f * static_cast<float>(i));
    auto installed = shard.Init(header, InitialValues(header, initial));
    EXPECT_TRUE(installed.ok()) << installed.status();
    options.bind_host = "127.0.0.1";
    options.max_partition_bytes = 256;
    server = std::make_unique<DataPlaneServer>(&shard, &executor, options);
    EXPECT_TRUE(server->Start().ok());
  }

  // A connection to the local socket, proved: the shard answered the request for
  // `ticket` with the right proof. The hello is the caller's.
  int ConnectLocal(const std::string& ticket) {
    absl::StatusOr<int> fd = dp::ConnectLocal(server->local_socket(), absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return -1;
    dp::SetReceiveTimeout(*fd, absl::Seconds(20));
    const std::string challenge(dp::kDigestBytes, 'c');
    auto request = dp::EncodeLocalRequest(dp::TicketDigest(ticket), challenge);
    iovec piece = {request.data(), request.size()};
    EXPECT_TRUE(dp::WriteAll(*fd, &piece, 1, "test").ok());
    std::string proof(dp::kDigestBytes, '\0');
    EXPECT_TRUE(dp::ReadFull(*fd, proof.data(), proof.size(), "test").ok());
    EXPECT_EQ(proof, dp::LocalProof(ticket, challenge, dp::LocalNamespaceId()));
    return *fd;
  }

  std::string Ticket(uint32_t node = 0, uint64_t generation = 0) {
    absl::StatusOr<v1::OpenDataPlaneResponse> issued = server->Issue("job-1", generation, node);
    EXPECT_TRUE(issued.ok()) << issued.status();
    return issued.ok() ? issued->ticket() : std::string();
  }

  int Connect() {
    absl::StatusOr<int> fd = dp::Connect("127.0.0.1", server->port(), absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    dp::SetReceiveTimeout(*fd, absl::Seconds(20));
    return *fd;
  }

  v1::InitHeader header;
  std::vector<float> initial;
  ParameterShard shard;
  PartitionExecutor executor;
  std::unique_ptr<DataPlaneServer> server;
};

void Send(int fd, absl::string_view bytes) {
  iovec piece = {const_cast<char*>(bytes.data()), bytes.size()};
  ASSERT_TRUE(dp::WriteAll(fd, &piece, 1, "test").ok());
}

// A frame as the client writes it.
std::string Frame(const std::string& payload) {
  auto header = dp::EncodeFrameHeader(dp::kMessage, payload.size());
  return std::string(header.data(), header.size()) + payload;
}

// Every field of the push but its data.
PushHeader HeaderOf(const v1::GradientPush& push) {
  PushHeader header;
  header.job_id = push.job_id();
  header.generation = push.generation();
  header.step = push.step();
  header.node_rank = push.node_rank();
  header.partition_id = push.partition_id();
  header.dtype = push.dtype();
  header.sample_count = push.sample_count();
  header.steps = push.steps();
  return header;
}

std::string PushBytes(const v1::GradientPush& push) {
  return GradientPushHead(HeaderOf(push), push.data().size()) + push.data();
}

// The next frame: a message (its payload) or a status (returned as that status).
struct Received {
  bool is_status = false;
  absl::Status status;
  std::string payload;
  uint32_t kind = 0;
};
Received Read(int fd) {
  Received received;
  absl::StatusOr<dp::FrameHeader> header = dp::ReadFrameHeader(fd, 1 << 20, "test");
  if (!header.ok()) {
    received.is_status = true;
    received.status = absl::UnavailableError(absl::StrCat("no frame: ", header.status().message()));
    return received;
  }
  received.kind = header->kind;
  received.payload.resize(header->length);
  EXPECT_TRUE(dp::ReadFull(fd, received.payload.data(), received.payload.size(), "test").ok());
  if (header->kind == dp::kStatus) {
    received.is_status = true;
    received.status = dp::ParseStatusPayload(received.payload);
  }
  return received;
}

// The next frame as an update, decoded: inline (kMessage), or placed in `region`
// (kShared: its place, checked to lie in the region, in `place`).
struct Update {
  uint32_t kind = 0;
  dp::SharedPlace place;
  std::string payload;  // The frame's bytes, which the view refers to.
  ReceivedMessage message;
  PartitionValuesView values;
};
void ReadUpdate(int fd, const SharedRegion* region, Update& update) {
  Received received = Read(fd);
  ASSERT_FALSE(received.is_status) << received.status;
  update.kind = received.kind;
  update.payload = std::move(received.payload);
  if (update.kind != dp::kShared) {
    ASSERT_EQ(update.kind, dp::kMessage);
    ASSERT_TRUE(DecodePartitionValues(update.payload, &update.message, &update.values).ok());
    return;
  }
  ASSERT_NE(region, nullptr) << "a shared update on a connection without a region";
  ASSERT_GE(update.payload.size(), dp::kSharedPrefixBytes);
  update.place = dp::ParseSharedPlace(update.payload.data());
  ASSERT_TRUE(region->Holds(update.place.offset, update.place.size));
  ASSERT_TRUE(DecodePartitionValues(
                  absl::string_view(update.payload).substr(dp::kSharedPrefixBytes),
                  absl::string_view(region->data() + update.place.offset, update.place.size),
                  &update.message, &update.values)
                  .ok());
}

// Connects with a hello carrying `ticket`; the shard's answer.
absl::Status Hello(int fd, const std::string& ticket) {
  auto hello = dp::EncodeHello(ticket);
  Send(fd, absl::string_view(hello.data(), hello.size()));
  Received answer = Read(fd);
  EXPECT_TRUE(answer.is_status);
  return answer.status;
}

// The status that ends the connection, skipping any values before it.
absl::Status EndOf(int fd) {
  for (int i = 0; i < 100; ++i) {
    Received received = Read(fd);
    if (received.is_status) return received.status;
  }
  return absl::InternalError("no end");
}

// On an admitted connection: node 0 pushes step 0 of every partition (the gradient
// sum `grad` over `samples` samples); the values that come back must be the shard's
// SGD update (rate 0.5) of each. Then a clean close: the shard answers with OK once
// every push has its values.
void PushStepZeroAndCheck(Fixture& f, int fd, const std::vector<float>& grad, int samples) {
  for (uint32_t p = 0; p < 3; ++p) {
    Send(fd, Frame(PushBytes(MakePush(f.header, 0, 0, 0, p, grad, samples))));
  }
  std::vector<float> got(kElements, -1.0f);
  for (int i = 0; i < 3; ++i) {
    Update update;
    ASSERT_NO_FATAL_FAILURE(ReadUpdate(fd, nullptr, update));
    EXPECT_EQ(update.values.step, 1u);
    const v1::Partition& partition = f.header.plan().partitions(update.values.partition_id);
    CopyFloatsInto(update.values.data, got.data() + partition.offset());
  }
  for (int64_t i = 0; i < kElements; ++i) {
    EXPECT_EQ(got[i], f.initial[i] - 0.5f * (grad[i] / static_cast<float>(samples))) << i;
  }
  ::shutdown(fd, SHUT_WR);
  EXPECT_TRUE(EndOf(fd).ok());
}

TEST(DataPlaneTest, PushesTrainExactlyAsTheShardDoes) {
  Fixture f;
  const int fd = f.Connect();
  ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) grad[i] = 0.5f - 0.003f * static_cast<float>(i);
  PushStepZeroAndCheck(f, fd, grad, 2);
  ::close(fd);
}

// A metric's value in `registry`: the sum over its series with `label`=`value` (and
// `label2`=`value2` when given), or over all of them; -1 when it has none.
double MetricValue(prometheus::Registry& registry, const std::string& name,
                   const std::string& label = "", const std::string& value = "",
                   const std::string& label2 = "", const std::string& value2 = "") {
  double sum = 0;
  bool found = false;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      bool match = label.empty();
      bool match2 = label2.empty();
      for (const prometheus::ClientMetric::Label& l : metric.label) {
        match = match || (l.name == label && l.value == value);
        match2 = match2 || (l.name == label2 && l.value == value2);
      }
      if (!match || !match2) continue;
      found = true;
      sum += family.type == prometheus::MetricType::Counter ? metric.counter.value
                                                            : metric.gauge.value;
    }
  }
  return found ? sum : -1;
}

TEST(DataPlaneTest, ATicketAdmitsOneConnectionOnly) {
  DataPlaneOptions options;
  auto registry = std::make_shared<prometheus::Registry>();
  options.registry = registry;
  Fixture f(options);
  const std::string ticket = f.Ticket();
  const int first = f.Connect();
  ASSERT_TRUE(Hello(first, ticket).ok());
  const int second = f.Connect();
  absl::Status refused = Hello(second, ticket);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("unknown, used or expired ticket"));
  EXPECT_GE(f.server->refused(), 1u);
  // On the shard's /metrics: one admitted, one refused, no ticket left.
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_connections_total", "result",
                        "admitted", "lane", "tcp"),
            1);
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_connections_total", "result",
                        "refused", "lane", "tcp"),
            1);
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_connections_total", "lane", "local"),
            0);
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_tickets"), 0);
  EXPECT_GE(MetricValue(*registry, "tributary_ps_data_plane_connections"), 1);
  f.Ticket();
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_tickets"), 1);
  ::close(first);
  ::close(second);
}

TEST(DataPlaneTest, UnknownAndExpiredTicketsAreRefused) {
  DataPlaneOptions options;
  options.ticket_lifetime = absl::Milliseconds(50);
  Fixture f(options);
  const int unknown = f.Connect();
  EXPECT_EQ(Hello(unknown, std::string(32, 'x')).code(), absl::StatusCode::kUnauthenticated);
  ::close(unknown);
  const std::string ticket = f.Ticket();
  absl::SleepFor(absl::Milliseconds(120));
  const int late = f.Connect();
  EXPECT_EQ(Hello(late, ticket).code(), absl::StatusCode::kUnauthenticated);
  ::close(late);
}

TEST(DataPlaneTest, AWrongHelloIsNamed) {
  Fixture f;
  const int fd = f.Connect();
  std::string hello(dp::kHelloBytes, '\0');
  hello.replace(0, 4, "GET ");
  Send(fd, hello);
  Received answer = Read(fd);
  ASSERT_TRUE(answer.is_status);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status.message(), HasSubstr("did not start with \"TRDP\" (first bytes 0x47455420)"));
  ::close(fd);

  const int versioned = f.Connect();
  auto good = dp::EncodeHello(f.Ticket());
  std::string bumped(good.data(), good.size());
  bumped[4] = 9;
  Send(versioned, bumped);
  answer = Read(versioned);
  EXPECT_THAT(answer.status.message(), HasSubstr("protocol version 9"));
  ::close(versioned);
}

TEST(DataPlaneTest, AFrameAboveTheLimitIsRefusedBeforeReading) {
  Fixture f;
  const int fd = f.Connect();
  ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
  auto header = dp::EncodeFrameHeader(dp::kMessage, ~uint64_t{0});
  Send(fd, absl::string_view(header.data(), header.size()));
  absl::Status ended = EndOf(fd);
  EXPECT_EQ(ended.code(), absl::StatusCode::kInvalidArgument) << ended;
  EXPECT_THAT(ended.message(), HasSubstr("a frame of 18446744073709551615 bytes; the limit is "
                                         "1280"));
  ::close(fd);

  const int kinded = f.Connect();
  ASSERT_TRUE(Hello(kinded, f.Ticket()).ok());
  auto odd = dp::EncodeFrameHeader(static_cast<dp::FrameKind>(7), 4);
  Send(kinded, absl::string_view(odd.data(), odd.size()));
  EXPECT_THAT(EndOf(kinded).message(), HasSubstr("unknown frame kind 7"));
  ::close(kinded);
}

TEST(DataPlaneTest, APushForAnotherNodeOrAStaleGenerationEndsTheConnection) {
  Fixture f(DataPlaneOptions{}, /*nodes=*/2);
  std::vector<float> grad(kElements, 0.25f);
  const int fd = f.Connect();
  ASSERT_TRUE(Hello(fd, f.Ticket(/*node=*/0)).ok());
  Send(fd, Frame(PushBytes(MakePush(f.header, 0, 0, /*node=*/1, 0, grad, 1))));
  absl::Status ended = EndOf(fd);
  EXPECT_EQ(ended.code(), absl::StatusCode::kPermissionDenied) << ended;
  EXPECT_THAT(ended.message(), HasSubstr("speaks for node 0 of generation 0 of job job-1; a "
                                         "push claimed node 1 of generation 0 of job job-1"));
  ::close(fd);

  // The shard's own validation, as on gRPC: a generation the shard is past.
  ASSERT_TRUE(f.shard.BeginGeneration([] {
    v1::BeginGenerationRequest request;
    request.set_job_id("job-1");
    request.set_generation(1);
    request.set_num_nodes(2);
    return request;
  }()).ok());
  const int stale = f.Connect();
  ASSERT_TRUE(Hello(stale, f.Ticket(0, /*generation=*/0)).ok());
  Send(stale, Frame(PushBytes(MakePush(f.header, 0, 0, 0, 0, grad, 1))));
  ended = EndOf(stale);
  EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition) << ended;
  ::close(stale);
}

TEST(DataPlaneTest, GarbageEndsOnlyItsOwnConnection) {
  Fixture f;
  std::mt19937 random(7);
  for (int round = 0; round < 20; ++round) {
    const int fd = f.Connect();
    if (round % 2 == 0) {
      ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
    }
    std::string garbage(1 + random() % 300, '\0');
    for (char& c : garbage) c = static_cast<char>(random());
    // A plausible frame header half of the time, so the payload is decoded.
    if (round % 4 == 0) garbage = Frame(garbage);
    Send(fd, garbage);
    ::shutdown(fd, SHUT_WR);
    Received received = Read(fd);
    EXPECT_TRUE(received.is_status);
    ::close(fd);
  }
  // Still serving.
  const int fd = f.Connect();
  ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
  std::vector<float> grad(kElements, 0.5f);
  Send(fd, Frame(PushBytes(MakePush(f.header, 0, 0, 0, 0, grad, 1))));
  Received values = Read(fd);
  EXPECT_FALSE(values.is_status) << values.status;
  ::close(fd);
}

TEST(DataPlaneTest, SilentPeersAndTooManyConnectionsAreClosed) {
  DataPlaneOptions options;
  options.hello_timeout = absl::Milliseconds(200);
  options.max_connections = 1;
  Fixture f(options);
  const int silent = f.Connect();
  const absl::Time start = absl::Now();
  char byte;
  // Closed without a word once the hello timeout passed (no hello: no status).
  EXPECT_LE(::recv(silent, &byte, 1, 0), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  ::close(silent);

  // Wait until the shard forgot the silent connection, then fill the one place.
  for (int i = 0; i < 100 && f.server->connections() > 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  const int first = f.Connect();
  ASSERT_TRUE(Hello(first, f.Ticket()).ok());
  const int second = f.Connect();
  EXPECT_LE(::recv(second, &byte, 1, 0), 0);  // Closed at once.
  ::close(second);
  ::close(first);
}

// The hello has one deadline: a peer trickling a byte at a time is cut off at it.
TEST(DataPlaneTest, TricklingPeersAreCutAtTheHelloDeadline) {
  DataPlaneOptions options;
  options.hello_timeout = absl::Milliseconds(300);
  Fixture f(options);
  const int trickle = f.Connect();
  const absl::Time start = absl::Now();
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = ::send(trickle, "T", 1, MSG_NOSIGNAL) < 0;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));  // Not 100 x 50 ms.
  ::close(trickle);
}

// Peers that owe their hello are few, and a newcomer evicts the one that owed it
// longest: a stranger that holds every such place, and takes each back as soon as it
// is closed, still cannot keep a worker out (it sends its hello at once).
TEST(DataPlaneTest, SilentStrangersCannotStarveAdmissions) {
  DataPlaneOptions options;
  options.hello_timeout = absl::Seconds(30);  // The stranger is never cut by time.
  options.max_unadmitted = 4;
  Fixture f(options);
  std::vector<int> stranger;
  for (int i = 0; i < options.max_unadmitted; ++i) stranger.push_back(f.Connect());
  for (int round = 0; round < 5; ++round) {
    // The stranger re-opens whatever was closed, keeping every unadmitted place.
    for (int& fd : stranger) {
      pollfd check{fd, POLLIN, 0};
      if (::poll(&check, 1, 0) > 0) {
        ::close(fd);
        fd = f.Connect();
      }
    }
    const int worker = f.Connect();
    const absl::Status admitted = Hello(worker, f.Ticket());
    EXPECT_TRUE(admitted.ok()) << "round " << round << ": " << admitted;
    ::close(worker);
  }
  // The evicted strangers were closed with a word-less cut, counted as refused.
  EXPECT_GE(f.server->refused(), 1u);
  for (int fd : stranger) ::close(fd);
}

TEST(DataPlaneTest, TicketsAreBounded) {
  DataPlaneOptions options;
  options.max_tickets = 2;
  Fixture f(options);
  EXPECT_TRUE(f.server->Issue("job-1", 1, 0).ok());
  EXPECT_TRUE(f.server->Issue("job-1", 1, 0).ok());
  absl::StatusOr<v1::OpenDataPlaneResponse> third = f.server->Issue("job-1", 1, 0);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("2 tickets outstanding"));

  // One node asking again and again keeps only its 16 newest.
  DataPlaneOptions many;
  Fixture g(many);
  std::vector<std::string> tickets;
  for (int i = 0; i < 20; ++i) tickets.push_back(g.Ticket());
  const int old = g.Connect();
  EXPECT_EQ(Hello(old, tickets[0]).code(), absl::StatusCode::kUnauthenticated);
  ::close(old);
  const int fresh = g.Connect();
  EXPECT_TRUE(Hello(fresh, tickets.back()).ok());
  ::close(fresh);
}

TEST(DataPlaneTest, ShutdownEndsOpenConnections) {
  Fixture f;
  const int fd = f.Connect();
  ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
  f.server->Shutdown();
  Received received = Read(fd);
  ASSERT_TRUE(received.is_status);
  EXPECT_EQ(received.status.code(), absl::StatusCode::kUnavailable) << received.status;
  ::close(fd);
  // No more tickets: the listeners are closed, and the local socket's name is free for
  // anyone to take.
  EXPECT_EQ(f.server->Issue("job-1", 0, 0).status().code(), absl::StatusCode::kUnavailable);
}

// The local lane: the same pushes give the same values as on TCP, once the shard
// proved it issued the ticket; the ticket is still good for one connection only.
TEST(DataPlaneTest, TheLocalSocketServesTheSameStreamAfterTheShardsProof) {
  DataPlaneOptions options;
  auto registry = std::make_shared<prometheus::Registry>();
  options.registry = registry;
  Fixture f(options);
  absl::StatusOr<v1::OpenDataPlaneResponse> issued = f.server->Issue("job-1", 0, 0);
  ASSERT_TRUE(issued.ok()) << issued.status();
  EXPECT_TRUE(dp::IsLocalSocketName(issued->local_socket())) << issued->local_socket();
  EXPECT_EQ(issued->local_socket(), f.server->local_socket());
  const int fd = f.ConnectLocal(issued->ticket());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(Hello(fd, issued->ticket()).ok());
  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) grad[i] = 0.25f - 0.002f * static_cast<float>(i);
  PushStepZeroAndCheck(f, fd, grad, 4);
  ::close(fd);
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_connections_total", "result",
                        "admitted", "lane", "local"),
            1);
  // Used: neither lane admits it again, and the local socket gives no proof for it.
  const int again = f.Connect();
  EXPECT_EQ(Hello(again, issued->ticket()).code(), absl::StatusCode::kUnauthenticated);
  ::close(again);
  absl::StatusOr<int> local = dp::ConnectLocal(f.server->local_socket(), absl::Seconds(5));
  ASSERT_TRUE(local.ok()) << local.status();
  auto request = dp::EncodeLocalRequest(dp::TicketDigest(issued->ticket()),
                                        std::string(dp::kDigestBytes, 'd'));
  Send(*local, absl::string_view(request.data(), request.size()));
  dp::SetReceiveTimeout(*local, absl::Seconds(20));
  char byte;
  EXPECT_EQ(dp::ReadFull(*local, &byte, 1, "proof").code(), absl::StatusCode::kOutOfRange)
      << "closed without a byte";
  ::close(*local);
}

// A stranger on the local socket: a request naming no outstanding ticket, a plain
// hello (no request first) and garbage are each closed without a byte; the shard
// counts them refused and still serves the ticket's owner.
TEST(DataPlaneTest, TheLocalSocketAnswersNothingWithoutAnOutstandingTicket) {
  DataPlaneOptions options;
  auto registry = std::make_shared<prometheus::Registry>();
  options.registry = registry;
  Fixture f(options);
  const std::string ticket = f.Ticket();
  std::vector<std::string> attempts;
  auto unknown = dp::EncodeLocalRequest(dp::TicketDigest(std::string(32, 'x')),
                                        std::string(dp::kDigestBytes, 'c'));
  attempts.emplace_back(unknown.data(), unknown.size());
  auto hello = dp::EncodeHello(ticket);
  attempts.emplace_back(std::string(hello.data(), hello.size()) + std::string(28, '\0'));
  attempts.push_back(std::string(dp::kLocalRequestBytes, '\xff'));
  for (const std::string& attempt : attempts) {
    absl::StatusOr<int> fd = dp::ConnectLocal(f.server->local_socket(), absl::Seconds(5));
    ASSERT_TRUE(fd.ok()) << fd.status();
    dp::SetReceiveTimeout(*fd, absl::Seconds(20));
    Send(*fd, attempt);
    char byte;
    EXPECT_EQ(dp::ReadFull(*fd, &byte, 1, "answer").code(), absl::StatusCode::kOutOfRange);
    ::close(*fd);
  }
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_connections_total", "result",
                        "refused", "lane", "local"),
            3);
  const int fd = f.ConnectLocal(ticket);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(Hello(fd, ticket).ok());
  ::close(fd);
}

// The local lane's shared region, as a worker lays it out: partition p's push at
// p * 512, its update at p * 512 + 256 (64 floats each).
constexpr uint64_t kSlot = 256;
constexpr uint64_t kRegionBytes = 3 * 2 * kSlot;

// Hands `region` over on an admitted local connection; the shard's answer.
absl::Status OfferRegion(int fd, const SharedRegion& region, uint64_t announced) {
  auto offer = dp::EncodeRegionOffer(announced);
  iovec piece = {offer.data(), offer.size()};
  EXPECT_TRUE(WriteWithDescriptor(fd, &piece, 1, region.fd(), "test").ok());
  Received answer = Read(fd);
  EXPECT_TRUE(answer.is_status);
  return answer.status;
}

// A connection on the local socket for `node`, admitted (-1 when it failed, the test
// failed too).
int AdmittedLocal(Fixture& f, uint32_t node = 0) {
  const std::string ticket = f.Ticket(node);
  const int fd = f.ConnectLocal(ticket);
  if (fd < 0) return -1;
  const absl::Status admitted = Hello(fd, ticket);
  EXPECT_TRUE(admitted.ok()) << admitted;
  return admitted.ok() ? fd : -1;
}

// The same, having handed over `region` (accepted).
int LocalWithRegion(Fixture& f, const SharedRegion& region, uint32_t node = 0) {
  const int fd = AdmittedLocal(f, node);
  if (fd < 0) return -1;
  const absl::Status taken = OfferRegion(fd, region, region.size());
  EXPECT_TRUE(taken.ok()) << taken;
  return taken.ok() ? fd : -1;
}

// A push whose data lies in the region at `place`.
std::string SharedPushFrame(const v1::GradientPush& push, const dp::SharedPlace& place) {
  const std::string head = GradientPushHead(HeaderOf(push), place.size);
  auto prefix = dp::EncodeSharedPlace(place);
  auto frame = dp::EncodeFrameHeader(dp::kShared, prefix.size() + head.size());
  return std::string(frame.data(), frame.size()) + std::string(prefix.data(), prefix.size()) +
         head;
}

// A worker on the local socket hands over a sealed region: its pushes' data is read
// there and each update is written into the slot its push named, the socket carrying
// only the heads. The values are the shard's exact SGD update, as over the socket. A
// push naming no room for its answer (capacity 0) is answered inline.
TEST(DataPlaneTest, TheLocalLaneMovesPushesAndUpdatesThroughASharedRegion) {
  DataPlaneOptions options;
  auto registry = std::make_shared<prometheus::Registry>();
  options.registry = registry;
  Fixture f(options);
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(kRegionBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  const int fd = LocalWithRegion(f, *region);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(MetricValue(*registry, "tributary_ps_data_plane_shared_regions_total"), 1);

  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) grad[i] = 0.75f - 0.004f * static_cast<float>(i);
  const int samples = 3;
  for (uint32_t p = 0; p < 3; ++p) {
    const v1::GradientPush push = MakePush(f.header, 0, 0, 0, p, grad, samples);
    ASSERT_EQ(push.data().size(), kSlot);
    std::memcpy(region->data() + 2 * kSlot * p, push.data().data(), kSlot);
    dp::SharedPlace place;
    place.offset = 2 * kSlot * p;
    place.size = kSlot;
    place.answer_offset = 2 * kSlot * p + kSlot;
    place.answer_capacity = p == 2 ? 0 : kSlot;
    Send(fd, SharedPushFrame(push, place));
  }
  std::vector<float> got(kElements, -1.0f);
  int shared = 0;
  for (int i = 0; i < 3; ++i) {
    Update update;
    ASSERT_NO_FATAL_FAILURE(ReadUpdate(fd, &*region, update));
    const PartitionValuesView& values = update.values;
    if (update.kind == dp::kShared) {
      ++shared;
      EXPECT_EQ(update.place.size, kSlot);
      EXPECT_EQ(update.place.offset, 2 * kSlot * values.partition_id + kSlot)
          << "the update lies in the slot its push named";
    } else {
      EXPECT_EQ(values.partition_id, 2u) << "only the push without room is answered inline";
    }
    EXPECT_EQ(values.step, 1u);
    const v1::Partition& partition = f.header.plan().partitions(values.partition_id);
    CopyFloatsInto(values.data, got.data() + partition.offset());
  }
  EXPECT_EQ(shared, 2);
  for (int64_t i = 0; i < kElements; ++i) {
    EXPECT_EQ(got[i], f.initial[i] - 0.5f * (grad[i] / static_cast<float>(samples))) << i;
  }
  ::shutdown(fd, SHUT_WR);
  EXPECT_TRUE(EndOf(fd).ok());
  ::close(fd);
}

// A push at the region's start, its answer in the slot after it.
dp::SharedPlace FirstSlots() {
  dp::SharedPlace place;
  place.size = kSlot;
  place.answer_offset = kSlot;
  place.answer_capacity = kSlot;
  return place;
}

// Occupies every lane of f's executor until `release` is notified.
void BlockExecutor(Fixture& f, absl::Notification& release) {
  absl::Notification lanes_blocked[2];
  for (int lane = 0; lane < 2; ++lane) {
    f.executor.Submit(lane, [&release, &blocked = lanes_blocked[lane]] {
      blocked.Notify();
      release.WaitForNotification();
    });
  }
  for (absl::Notification& blocked : lanes_blocked) blocked.WaitForNotification();
}

// Where the step's last push goes on an idle connection: the reader that read it sums it
// and the update goes out at once, even while every executor lane is busy with other
// work (a blocked lane here). Over TCP the writer sends it; with a region, the thread
// that summed it writes it into its slot, and with two nodes into the other node's
// region too.
TEST(DataPlaneTest, AnIdleConnectionsPushIsSummedByItsReaderNotQueuedOnTheExecutor) {
  absl::Notification release;  // Outlives the executors, whose lanes wait for it.
  Fixture f;
  Fixture two(DataPlaneOptions{}, /*nodes=*/2);
  absl::Cleanup release_lanes = [&release] { release.Notify(); };
  BlockExecutor(f, release);
  BlockExecutor(two, release);
  std::vector<float> grad(kElements);
  for (int64_t i = 0; i < kElements; ++i) grad[i] = 0.25f + 0.001f * static_cast<float>(i);
  const v1::Partition& first = f.header.plan().partitions(0);
  const float expected = f.initial[0] - 0.5f * (grad[0] / 2.0f);
  {
    const int fd = f.Connect();
    ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
    Send(fd, Frame(PushBytes(MakePush(f.header, 0, 0, 0, 0, grad, 2))));
    Update update;
    ASSERT_NO_FATAL_FAILURE(ReadUpdate(fd, nullptr, update));
    EXPECT_EQ(update.values.step, 1u);
    std::vector<float> got(first.length());
    CopyFloatsInto(update.values.data, got.data());
    EXPECT_EQ(got[0], expected);
    ::close(fd);
  }
  {
    absl::StatusOr<SharedRegion> region = SharedRegion::Create(kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    const int fd = LocalWithRegion(f, *region);
    ASSERT_GE(fd, 0);
    const v1::GradientPush push = MakePush(f.header, 0, 1, 0, 0, grad, 2);
    std::memcpy(region->data(), push.data().data(), kSlot);
    Send(fd, SharedPushFrame(push, FirstSlots()));
    Update update;
    ASSERT_NO_FATAL_FAILURE(ReadUpdate(fd, &*region, update));
    ASSERT_EQ(update.kind, dp::kShared);
    EXPECT_EQ(update.place.offset, kSlot);
    float got;
    std::memcpy(&got, region->data() + kSlot, sizeof(got));
    EXPECT_EQ(got, expected - 0.5f * (grad[0] / 2.0f));
    ::close(fd);
  }
  {
    // Node 0 pushes g, node 1 pushes 3g (2 samples each): the mean is g.
    std::vector<float> triple(kElements);
    for (int64_t i = 0; i < kElements; ++i) triple[i] = 3.0f * grad[i];
    std::vector<absl::StatusOr<SharedRegion>> regions;
    std::vector<int> fds;
    for (uint32_t node = 0; node < 2; ++node) {
      regions.push_back(SharedRegion::Create(kRegionBytes));
      ASSERT_TRUE(regions.back().ok()) << regions.back().status();
      fds.push_back(LocalWithRegion(two, *regions.back(), node));
      ASSERT_GE(fds.back(), 0);
    }
    for (uint32_t node = 0; node < 2; ++node) {
      const v1::GradientPush push =
          MakePush(two.header, 0, 0, node, 0, node == 0 ? grad : triple, 2);
      std::memcpy(regions[node]->data(), push.data().data(), kSlot);
      Send(fds[node], SharedPushFrame(push, FirstSlots()));
    }
    for (uint32_t node = 0; node < 2; ++node) {
      Update update;
      ASSERT_NO_FATAL_FAILURE(ReadUpdate(fds[node], &*regions[node], update));
      ASSERT_EQ(update.kind, dp::kShared) << "node " << node;
      float got;
      std::memcpy(&got, regions[node]->data() + kSlot, sizeof(got));
      EXPECT_EQ(got, two.initial[0] - 0.5f * ((grad[0] + triple[0]) / 4.0f)) << "node " << node;
      ::close(fds[node]);
    }
  }
}

// A peer that pushes on and stops reading: the updates the threads that summed its
// pushes could not hand the socket wait for its writer, in order (a frame cut short
// finished first), and those threads never wait for the peer: here its reader, which
// sums every push (each arrives on an idle connection), goes on reading and summing.
// When the peer reads again every update arrives whole.
TEST(DataPlaneTest, UpdatesForAPeerThatStopsReadingWaitForItsWriterInOrder) {
  Fixture f;
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(kRegionBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  const int fd = LocalWithRegion(f, *region);
  ASSERT_GE(fd, 0);
  std::vector<float> grad(kElements, 0.001f);
  const dp::SharedPlace place = FirstSlots();
  v1::PullRequest pull;
  pull.set_job_id("job-1");
  auto step_of_partition_0 = [&]() -> uint64_t {
    auto values = f.shard.Pull(pull);
    EXPECT_TRUE(values.ok()) << values.status();
    if (!values.ok()) return 0;
    for (const auto& partition : *values) {
      if (partition->partition_id() == 0) return partition->step();
    }
    return 0;
  };
  // Enough ~100-byte frames to fill the socket's send buffer several times over.
  constexpr uint64_t kSteps = 3000;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  for (uint64_t step = 0; step < kSteps; ++step) {
    const v1::GradientPush push = MakePush(f.header, 0, step, 0, 0, grad, 1);
    if (step == 0) std::memcpy(region->data(), push.data().data(), kSlot);
    Send(fd, SharedPushFrame(push, place));
    while (step_of_partition_0() <= step && absl::Now() < give_up) {
      absl::SleepFor(absl::Microseconds(20));
    }
    ASSERT_EQ(step_of_partition_0(), step + 1)
        << "the shard stopped summing once its peer stopped reading";
  }
  for (uint64_t step = 1; step <= kSteps; ++step) {
    Update update;
    ASSERT_NO_FATAL_FAILURE(ReadUpdate(fd, &*region, update))
        << "the update of step " << step;
    if (update.kind == dp::kShared) {
      ASSERT_EQ(update.place.offset, kSlot);
      ASSERT_EQ(update.place.size, kSlot);
    } else {
      // Queued behind the stall: the region holds one place per partition (the latest
      // push's), so the writer sends the rest inline.
      ASSERT_GT(step, 1u) << "the first update has its place in the region";
    }
    ASSERT_EQ(update.values.partition_id, 0u);
    ASSERT_EQ(update.values.step, step);
  }
  ::shutdown(fd, SHUT_WR);
  EXPECT_TRUE(EndOf(fd).ok());
  ::close(fd);
}

// A region the shard cannot trust (not sealed: the worker could shrink it under the
// mapping) or above its limit is refused with the reason, and the connection goes on
// with the bytes through the socket.
TEST(DataPlaneTest, AnUnsealedOrOversizedRegionIsRefusedAndTheLaneGoesOn) {
  DataPlaneOptions options;
  options.max_shared_region_bytes = kRegionBytes;
  Fixture f(options);
  {
    const int fd = AdmittedLocal(f);
    ASSERT_GE(fd, 0);
    const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(unsealed, 0);
    ASSERT_EQ(::ftruncate(unsealed, kRegionBytes), 0);
    auto offer = dp::EncodeRegionOffer(kRegionBytes);
    iovec piece = {offer.data(), offer.size()};
    ASSERT_TRUE(WriteWithDescriptor(fd, &piece, 1, unsealed, "test").ok());
    ::close(unsealed);
    Received answer = Read(fd);
    ASSERT_TRUE(answer.is_status);
    EXPECT_TRUE(absl::IsInvalidArgument(answer.status)) << answer.status;
    EXPECT_THAT(answer.status.message(), HasSubstr("F_SEAL_SHRINK"));
    std::vector<float> grad(kElements, 0.125f);
    PushStepZeroAndCheck(f, fd, grad, 1);
    ::close(fd);
  }
  {
    const int fd = AdmittedLocal(f);
    ASSERT_GE(fd, 0);
    absl::StatusOr<SharedRegion> large = SharedRegion::Create(2 * kRegionBytes);
    ASSERT_TRUE(large.ok()) << large.status();
    absl::Status answer = OfferRegion(fd, *large, 2 * kRegionBytes);
    EXPECT_TRUE(absl::IsInvalidArgument(answer)) << answer;
    EXPECT_THAT(answer.message(), HasSubstr("the limit is 1536"));
    ::close(fd);
  }
}

// Shared frames the shard cannot place end the connection with the values named: a
// push outside the region (offset or size up to 2^64-1), an answer slot outside it, a
// shared frame on a connection that handed over no region, and a second region.
TEST(DataPlaneTest, SharedFramesOutsideTheRegionEndTheConnection) {
  Fixture f;
  const v1::GradientPush push =
      MakePush(f.header, 0, 0, 0, 0, std::vector<float>(kElements, 1.0f), 1);
  struct Bad {
    dp::SharedPlace place;
    std::string named;
  };
  std::vector<Bad> bad;
  bad.push_back({{kRegionBytes - 10, kSlot, kSlot, kSlot}, "a shared push at [1526, +256)"});
  bad.push_back({{0, ~uint64_t{0}, kSlot, kSlot}, "does not lie in the region of 1536 bytes"});
  bad.push_back({{~uint64_t{0}, kSlot, kSlot, kSlot}, "does not lie in the region"});
  bad.push_back({{0, kSlot, kRegionBytes, 1}, "answered at [1536, +1)"});
  for (const Bad& b : bad) {
    absl::StatusOr<SharedRegion> region = SharedRegion::Create(kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    const int fd = LocalWithRegion(f, *region);
    ASSERT_GE(fd, 0);
    Send(fd, SharedPushFrame(push, b.place));
    absl::Status end = EndOf(fd);
    EXPECT_TRUE(absl::IsInvalidArgument(end)) << end;
    EXPECT_THAT(end.message(), HasSubstr(b.named));
    ::close(fd);
  }
  {  // No region: the TCP port.
    const int fd = f.Connect();
    ASSERT_TRUE(Hello(fd, f.Ticket()).ok());
    Send(fd, SharedPushFrame(push, {0, kSlot, kSlot, kSlot}));
    absl::Status end = EndOf(fd);
    EXPECT_TRUE(absl::IsInvalidArgument(end)) << end;
    EXPECT_THAT(end.message(), HasSubstr("without a shared region"));
    ::close(fd);
  }
  {  // A second region, after the first frame.
    absl::StatusOr<SharedRegion> region = SharedRegion::Create(kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    const int fd = LocalWithRegion(f, *region);
    ASSERT_GE(fd, 0);
    auto offer = dp::EncodeRegionOffer(0);
    iovec piece = {offer.data(), offer.size()};
    ASSERT_TRUE(WriteWithDescriptor(fd, &piece, 1, region->fd(), "test").ok());
    absl::Status end = EndOf(fd);
    EXPECT_TRUE(absl::IsInvalidArgument(end)) << end;
    EXPECT_THAT(end.message(), HasSubstr("a region, after its first frame"));
    ::close(fd);
  }
}

TEST(DataPlaneTest, NoLocalSocketWhenTurnedOff) {
  DataPlaneOptions options;
  options.local_socket = false;
  Fixture f(options);
  absl::StatusOr<v1::OpenDataPlaneResponse> issued = f.server->Issue("job-1", 0, 0);
  ASSERT_TRUE(issued.ok()) << issued.status();
  EXPECT_EQ(issued->local_socket(), "");
  EXPECT_EQ(f.server->local_socket(), "");
}

TEST(DataPlaneWireTest, LocalNamesAndProofs) {
  EXPECT_TRUE(dp::IsLocalSocketName("tributary-data-plane-0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(dp::IsLocalSocketName("tributary-data-plane-0123456789ABCDEF0123456789abcdef"));
  EXPECT_FALSE(dp::IsLocalSocketName("tributary-data-plane-0123"));
  EXPECT_FALSE(dp::IsLocalSocketName(
      std::string("tributary-data-plane-0123456789abcdef0123456789abcde\0", 54)));
  EXPECT_FALSE(dp::IsLocalSocketName("../../etc/passwd"));
  absl::StatusOr<int> refused = dp::ConnectLocal("/tmp/x", absl::Seconds(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing listens at a fresh name: NOT_FOUND (another host), not an error to report.
  absl::StatusOr<int> absent =
      dp::ConnectLocal("tributary-data-plane-00000000000000000000000000000000", absl::Seconds(1));
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound) << absent.status();
  // Known answers (Python's hashlib and hmac): the digest is SHA-256 and the proof is
  // keyed by the ticket itself, over the label, the challenge and the namespace.
  EXPECT_EQ(absl::BytesToHexString(dp::TicketDigest(std::string(32, 'a'))),
            "3ba3f5f43b92602683c19aee62a20342b084dd5971ddd33808d81a328879a547");
  const std::string a = dp::LocalProof(std::string(32, 'a'), std::string(32, 'c'), "boot/1:2");
  EXPECT_EQ(absl::BytesToHexString(a),
            "b16f61469d2a8b53fa9af0c7a4de4ea7963f3032b9c0aae0b1c8d5b680452778");
  EXPECT_NE(a, dp::LocalProof(std::string(32, 'b'), std::string(32, 'c'), "boot/1:2"));
  EXPECT_NE(a, dp::LocalProof(std::string(32, 'a'), std::string(32, 'd'), "boot/1:2"));
  EXPECT_NE(a, dp::LocalProof(std::string(32, 'a'), std::string(32, 'c'), "boot/1:3"));
  // This host's boot id and network namespace, the same every time.
  const std::string here = dp::LocalNamespaceId();
  EXPECT_EQ(here, dp::LocalNamespaceId());
  EXPECT_GT(here.size(), 36u) << here;
  EXPECT_NE(here.find('/'), std::string::npos) << here;
  EXPECT_TRUE(dp::SameBytes(a, a));
  EXPECT_FALSE(dp::SameBytes(a, a.substr(1)));
  std::string digest, challenge;
  auto request = dp::EncodeLocalRequest(std::string(32, 'g'), std::string(32, 'h'));
  char raw[dp::kLocalRequestBytes];
  std::memcpy(raw, request.data(), sizeof(raw));
  ASSERT_TRUE(dp::ParseLocalRequest(raw, &digest, &challenge).ok());
  EXPECT_EQ(digest, std::string(32, 'g'));
  EXPECT_EQ(challenge, std::string(32, 'h'));
  raw[0] = 'G';
  absl::Status wrong = dp::ParseLocalRequest(raw, &digest, &challenge);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("did not start with \"TRDL\""));
}

TEST(DataPlaneTest, BindsWhereTheListenAddressSays) {
  ParameterShard shard(ShardOptions{}, nullptr);
  PartitionExecutor executor(1);
  DataPlaneOptions options;
  options.bind_host = "localhost";  // A host name, as --listen may give.
  DataPlaneServer named(&shard, &executor, options);
  ASSERT_TRUE(named.Start().ok());
  EXPECT_GT(named.port(), 0);
  options.bind_host = "no-such-host.invalid";
  DataPlaneServer unknown(&shard, &executor, options);
  absl::Status refused = unknown.Start();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("no-such-host.invalid:0"));
}

}  // namespace
}  // namespace tributary::ps
