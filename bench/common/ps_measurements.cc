#include "bench/common/ps_measurements.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/channel.h"
#include "common/partition_plan.h"
#include "common/service_host.h"
#include "proto/parameter_server.grpc.pb.h"
#include "services/parameter_server/parameter_server_service.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"
#include "worker/comm/ps_client.h"
#include "common/wire_dtype.h"

namespace tributary::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --- raw TCP --------------------------------------------------------------------

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) PLOG(FATAL) << "raw TCP: send on fd " << fd;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void ReadAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n <= 0) PLOG(FATAL) << "raw TCP: recv on fd " << fd;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// A connected loopback TCP pair (client, server).
std::pair<int, int> TcpPair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    PLOG(FATAL) << "raw TCP: listen on 127.0.0.1";
  }
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    PLOG(FATAL) << "raw TCP: connect to 127.0.0.1:" << ntohs(address.sin_port);
  }
  const int server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  const int one = 1;
  for (int fd : {client, server}) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {client, server};
}

// --- the parameter server -----------------------------------------------------------

// One in-process shard: its own gRPC server, shard state and executor.
struct Shard {
  explicit Shard(int index, const PsConfig& config)
      : host(Options(config)),
        shard(ShardOptions(index, config), host.registry()),
        executor(config.summation_threads),
        service(&shard, &executor),
        data_plane(&shard, &executor, DataOptions(config)) {}

  static ps::DataPlaneOptions DataOptions(const PsConfig& config) {
    ps::DataPlaneOptions options;
    options.bind_host = "127.0.0.1";
    options.max_partition_bytes = static_cast<uint64_t>(config.partition_bytes);
    return options;
  }

  static ServerOptions Options(const PsConfig& config) {
    ServerOptions server;
    server.name = "ps_bench";
    server.listen_address = "127.0.0.1:0";
    server.http_port = -1;
    server.drain_grace = absl::ZeroDuration();
    server.max_receive_bytes = MaxReceiveBytesForPartition(config.partition_bytes);
    return server;
  }
  static ps::ShardOptions ShardOptions(int index, const PsConfig& config) {
    ps::ShardOptions options;
    options.shard_index = index;
    options.max_partition_bytes = config.partition_bytes;
    return options;
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", host.grpc_port()); }

  ServiceHost host;
  ps::ParameterShard shard;
  ps::PartitionExecutor executor;
  ps::ParameterServerService service;
  ps::DataPlaneServer data_plane;
};

absl::Status CheckConfig(const PsConfig& config) {
  if (config.model_bytes < 4 || config.model_bytes % 4 != 0 || config.partition_bytes < 4 ||
      config.partition_bytes % 4 != 0 || config.nodes < 1 || config.shards < 1 ||
      config.steps < 1 || config.warmup_steps < 0 || config.summation_threads < 1 ||
      WireBytes(config.wire_dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PS measurement: need model_bytes and partition_bytes positive multiples of 4 "
        "(got ",
        config.model_bytes, ", ", config.partition_bytes, "), nodes >= 1 (got ", config.nodes,
        "), shards >= 1 (got ", config.shards, "), steps >= 1 (got ", config.steps,
        "), warmup_steps >= 0 (got ", config.warmup_steps, "), summation_threads >= 1 (got ",
        config.summation_threads, ") and a wire dtype of FLOAT32, FLOAT16 or BFLOAT16 (got ",
        v1::DType_Name(config.wire_dtype), ")"));
  }
  return absl::OkStatus();
}

// The plan of a model made of one tensor of model_bytes.
absl::StatusOr<v1::PartitionPlan> PlanOf(const PsConfig& config) {
  const int64_t elements = config.model_bytes / 4;
  v1::ParameterLayout layout;
  v1::TensorView* tensor = layout.add_tensors();
  tensor->set_name("weights");
  tensor->add_shape(elements);
  tensor->set_length(elements);
  layout.set_total_elements(elements);
  return MakePartitionPlan(layout, config.partition_bytes, static_cast<uint32_t>(config.shards));
}

absl::Status InitShard(Shard& shard, int index, const v1::InitHeader& header_template,
                       int64_t max_receive_bytes) {
  ChannelOptions channel_options;
  channel_options.max_receive_bytes = max_receive_bytes;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(shard.address(), channel_options);
  if (!channel.ok()) return channel.status();
  auto stub = v1::ParameterServer::NewStub(*channel);
  grpc::ClientContext context;
  v1::InitPartitionsResponse response;
  auto writer = stub->InitPartitions(&context, &response);
  v1::InitPartitionsRequest request;
  *request.mutable_header() = header_template;
  request.mutable_header()->set_shard_index(static_cast<uint32_t>(index));
  writer->Write(request);
  for (const v1::Partition& partition : header_template.plan().partitions()) {
    if (partition.shard() != static_cast<uint32_t>(index)) continue;
    v1::PartitionValues* values = request.mutable_initial();
    values->set_partition_id(partition.id());
    values->set_dtype(v1::FLOAT32);
    values->mutable_data()->assign(partition.length() * 4, '\0');
    writer->Write(request);
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("InitPartitions on shard ", index, " at ",
                                               shard.address(), ": ", status.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace

double MemcpyGBps(size_t bytes, int repeats) {
  std::vector<char> source(bytes, 1), target(bytes, 0);
  std::memcpy(target.data(), source.data(), bytes);  // Fault the pages in.
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < 4; ++i) {
      source[i] = static_cast<char>(i);  // Keep the copies from being elided.
      std::memcpy(target.data(), source.data(), bytes);
    }
    best = std::max(best, 4.0 * bytes / SecondsSince(start) / 1e9);
  }
  if (target[3] != 3) LOG(FATAL) << "memcpy: the last copy did not land";
  return best;
}

double SumGBps(size_t model_bytes, v1::DType dtype, int repeats) {
  const size_t floats = model_bytes / 4;
  std::vector<char> wire(floats * WireBytes(dtype), 0);
  std::vector<float> halves(floats, 0.5f);
  NarrowInto(dtype, halves.data(), floats, wire.data());
  std::vector<float> sum(floats, 0.0f);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < 4; ++i) AccumulateInto(dtype, wire.data(), floats, sum.data());
    best = std::max(best, 4.0 * wire.size() / SecondsSince(start) / 1e9);
  }
  return best;
}

namespace {

std::pair<int, int> UnixPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) PLOG(FATAL) << "raw Unix: socketpair";
  return {fds[0], fds[1]};
}

double RawSocketGBps(const std::vector<size_t>& bytes_per_connection, size_t chunk, int steps,
                     bool unix_sockets) {
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < bytes_per_connection.size(); ++i) {
    pairs.push_back(unix_sockets ? UnixPair() : TcpPair());
  }
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  const auto wait_go = [&] {
    ready.fetch_add(1);
    while (!go.load()) std::this_thread::yield();
  };
  double total = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [client, server] = pairs[i];
    const size_t bytes = bytes_per_connection[i];
    const size_t chunks = (bytes + chunk - 1) / chunk;
    total += 2.0 * steps * static_cast<double>(bytes);
    threads.emplace_back([&, server = server, bytes, chunks] {  // Echo server.
      std::vector<char> buffer(chunk);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          const size_t n = std::min(chunk, bytes - c * chunk);
          ReadAll(server, buffer.data(), n);
          WriteAll(server, buffer.data(), n);
        }
      }
    });
    threads.emplace_back([&, client = client, bytes, chunks] {  // Client sender.
      std::vector<char> buffer(chunk, 7);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          WriteAll(client, buffer.data(), std::min(chunk, bytes - c * chunk));
        }
      }
    });
    threads.emplace_back([&, client = client, bytes, chunks] {  // Client receiver.
      std::vector<char> buffer(chunk);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          ReadAll(client, buffer.data(), std::min(chunk, bytes - c * chunk));
        }
      }
    });
  }
  while (ready.load() < static_cast<int>(threads.size())) std::this_thread::yield();
  const auto start = Clock::now();
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  const double seconds = SecondsSince(start);
  for (auto [client, server] : pairs) {
    ::close(client);
    ::close(server);
  }
  return total / seconds / 1e9;
}

}  // namespace

double RawTcpGBps(const std::vector<size_t>& bytes_per_connection, size_t chunk, int steps) {
  return RawSocketGBps(bytes_per_connection, chunk, steps, /*unix_sockets=*/false);
}

double RawUnixGBps(const std::vector<size_t>& bytes_per_connection, size_t chunk, int steps) {
  return RawSocketGBps(bytes_per_connection, chunk, steps, /*unix_sockets=*/true);
}

// Bytes each connection carries up per step: every (node, shard, stream), a shard's
// partitions dealt among its streams in turn as PsClient deals them.
std::vector<size_t> StreamBytesOf(const v1::PartitionPlan& plan, const PsConfig& config) {
  const int lanes = std::max(1, config.streams_per_shard);
  std::vector<size_t> per_lane(static_cast<size_t>(config.shards) * lanes, 0);
  std::vector<int> dealt(config.shards, 0);
  for (const v1::Partition& partition : plan.partitions()) {
    const int shard = static_cast<int>(partition.shard());
    per_lane[shard * lanes + dealt[shard]++ % lanes] +=
        static_cast<size_t>(partition.length()) * sizeof(float);
  }
  std::vector<size_t> bytes;
  for (int n = 0; n < config.nodes; ++n) {
    for (size_t lane_bytes : per_lane) {
      if (lane_bytes > 0) bytes.push_back(lane_bytes);
    }
  }
  return bytes;
}

absl::StatusOr<std::vector<size_t>> StreamBytes(const PsConfig& config) {
  if (absl::Status valid = CheckConfig(config); !valid.ok()) return valid;
  absl::StatusOr<v1::PartitionPlan> plan = PlanOf(config);
  if (!plan.ok()) return plan.status();
  return StreamBytesOf(*plan, config);
}

absl::StatusOr<PsResult> MeasurePs(const PsConfig& config) {
  if (absl::Status valid = CheckConfig(config); !valid.ok()) return valid;
  absl::StatusOr<v1::PartitionPlan> plan = PlanOf(config);
  if (!plan.ok()) return plan.status();
  const int64_t max_receive_bytes = MaxReceiveBytesForPartition(config.partition_bytes);
  const int total_steps = config.warmup_steps + config.steps;

  std::vector<std::unique_ptr<Shard>> shards;
  for (int s = 0; s < config.shards; ++s) {
    shards.push_back(std::make_unique<Shard>(s, config));
    Shard& shard = *shards.back();
    if (absl::Status started = shard.data_plane.Start(); !started.ok()) return started;
    shard.service.set_data_plane(&shard.data_plane);
    shard.host.AddService(&shard.service, v1::ParameterServer::service_full_name());
    if (absl::Status started = shard.host.Start(); !started.ok()) {
      return absl::UnavailableError(absl::StrCat("shard ", s, ": ", started.message()));
    }
    shard.host.SetServing(true);
  }
  const auto shutdown = [&] {
    for (auto& shard : shards) {
      shard->data_plane.Shutdown();
      shard->host.Shutdown(absl::Seconds(2));
    }
  };

  // The job: SGD, SYNC over `nodes` nodes.
  v1::InitHeader header;
  header.set_job_id("bench");
  v1::JobSpec& spec = *header.mutable_job();
  spec.set_mode(v1::SYNC);
  spec.set_nodes_min(static_cast<uint32_t>(config.nodes));
  spec.set_max_steps(static_cast<uint64_t>(total_steps));
  spec.set_partition_bytes(config.partition_bytes);
  spec.set_partition_cut(v1::CUT_EVEN);  // The plan below: MakePartitionPlan's even cut.
  spec.set_wire_dtype(config.wire_dtype);
  spec.mutable_optimizer()->set_type(v1::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  // A model with at least the plan's elements, as the shard checks: logistic regression
  // of 256 classes over enough inputs.
  constexpr int64_t kClasses = 256;
  spec.mutable_model()->set_name("logreg");
  spec.mutable_model()->add_layer_sizes(
      static_cast<uint32_t>((plan->total_elements() + kClasses - 1) / kClasses));
  spec.mutable_model()->add_layer_sizes(kClasses);
  *header.mutable_plan() = *plan;
  header.set_total_steps(static_cast<uint64_t>(total_steps));
  for (int s = 0; s < config.shards; ++s) {
    if (absl::Status init = InitShard(*shards[s], s, header, max_receive_bytes); !init.ok()) {
      shutdown();
      return init;
    }
  }

  // One node per thread, each with the workers' own PS client (worker/comm/ps_client:
  // a stream per shard on a connection of its own, like separate machines, pushes sent
  // from the gradient buffer and updates written into the parameters).
  const v1::TrainingMode mode = v1::SYNC;
  std::vector<v1::ShardInfo> shard_map;
  for (int s = 0; s < config.shards; ++s) {
    v1::ShardInfo& info = shard_map.emplace_back();
    info.set_shard_index(static_cast<uint32_t>(s));
    info.set_address(shards[s]->address());
  }
  struct Node {
    std::unique_ptr<worker::PsClient> client;
    std::vector<float> grad;
    std::vector<float> params;
  };
  std::vector<Node> nodes(config.nodes);
  for (int n = 0; n < config.nodes; ++n) {
    ChannelOptions channel;
    channel.max_receive_bytes = max_receive_bytes;
    channel.own_connection = true;
    worker::PsIdentity identity;
    identity.job_id = "bench";
    identity.node_rank = static_cast<uint32_t>(n);
    nodes[n].client = std::make_unique<worker::PsClient>(
        identity, *plan, shard_map, channel, mode, config.wire_dtype,
        worker::kDefaultPsRetryBudget, config.streams_per_shard, config.transport,
        config.shared_memory);
    nodes[n].grad.assign(plan->total_elements(), 0.001f * static_cast<float>(n + 1));
    nodes[n].params.assign(plan->total_elements(), 0.0f);
    if (absl::Status opened = nodes[n].client->Open(); !opened.ok()) {
      shutdown();
      return opened;
    }
  }

  absl::Mutex mu;
  absl::Status failure;  // The first node's error; the others are interrupted.
  const auto fail = [&](absl::Status status) {
    absl::MutexLock lock(&mu);
    if (!failure.ok()) return;
    failure = std::move(status);
    for (Node& node : nodes) node.client->Interrupt("another node failed");
  };
  const int node_count = config.nodes;
  std::atomic<int> arrived{0};
  std::atomic<int> barrier_round{0};
  const auto barrier = [&](int round) {  // All nodes start the timed steps together.
    if (arrived.fetch_add(1) + 1 == node_count * round) barrier_round.store(round);
    while (barrier_round.load() < round) std::this_thread::yield();
  };
  Clock::time_point start;
  std::vector<std::thread> threads;
  std::vector<uint64_t> moved_before(config.nodes, 0);
  for (int i = 0; i < node_count; ++i) {
    threads.emplace_back([&, i] {
      Node& node = nodes[i];
      bool ok = true;
      for (int step = 0; step < total_steps; ++step) {
        if (step == config.warmup_steps) {
          barrier(1);
          if (i == 0) start = Clock::now();
          moved_before[i] = node.client->bytes_pushed() + node.client->bytes_pulled();
          barrier(2);
        }
        if (!ok) continue;  // Keep meeting the barriers so the others are not stuck.
        // Push every partition, last first (as backward finishes them), then take every
        // update, first first (as the next forward needs them).
        for (int p = plan->partitions_size() - 1; p >= 0 && ok; --p) {
          const v1::Partition& partition = plan->partitions(p);
          // As the worker does: the update comes back into the parameters.
          node.client->ExpectUpdateInto(partition.id(), static_cast<uint64_t>(step),
                                        node.params.data() + partition.offset());
          absl::Status pushed = node.client->Push(static_cast<uint64_t>(step), partition.id(),
                                                  node.grad.data() + partition.offset(), 1, 1);
          if (!pushed.ok()) {
            fail(pushed);
            ok = false;
          }
        }
        for (const v1::Partition& partition : plan->partitions()) {
          if (!ok) break;
          absl::Status updated =
              node.client->WaitUpdated(partition.id(), static_cast<uint64_t>(step),
                                       absl::Seconds(60), node.params.data() + partition.offset());
          if (!updated.ok()) {
            fail(absl::UnavailableError(
                absl::StrCat("node ", i, " step ", step, ": ", updated.message())));
            ok = false;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = SecondsSince(start);
  uint64_t bytes = 0;
  for (int n = 0; n < config.nodes; ++n) {
    bytes += nodes[n].client->bytes_pushed() + nodes[n].client->bytes_pulled() - moved_before[n];
    nodes[n].client->Close();
  }
  PsResult result;
  result.gbps = static_cast<double>(bytes) / seconds / 1e9;
  result.step_seconds = seconds / config.steps;
  for (auto& shard : shards) {
    result.aggregation_wait_seconds += shard->shard.Status().aggregation_wait_seconds();
  }
  result.aggregation_wait_seconds /= config.shards;
  result.stream_bytes = StreamBytesOf(*plan, config);
  shutdown();
  {
    absl::MutexLock lock(&mu);
    if (!failure.ok()) return failure;
  }
  return result;
}

}  // namespace tributary::bench
