// ps_bench: how close the parameter server's push/pull path gets to the machine's
// limits, measured side by side in one process on loopback:
//   memcpy     single-thread copy bandwidth (bytes copied per second);
//   raw TCP    plain sockets over 127.0.0.1 moving the PS's traffic pattern: each of
//              N clients sends the model in partition-sized chunks and gets every
//              chunk back (bytes sent + received per second);
//   sum        the shard's summation loop alone (gradient bytes summed per second);
//   PS         a real shard (gRPC server, executor, SYNC aggregation, SGD) with N
//              node streams pushing the model and pulling the new values each step
//              (bytes pushed + pulled per second).
// Ends with one JSON line holding the figures and their ratios.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/channel.h"
#include "common/partition_plan.h"
#include "common/service_host.h"
#include "proto/parameter_server.grpc.pb.h"
#include "services/parameter_server/malloc_tuning.h"
#include "services/parameter_server/parameter_server_service.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"
#include "services/parameter_server/wire_dtype.h"

ABSL_FLAG(int64_t, model_bytes, 100 << 20,
          "Model size in bytes of FLOAT32 parameters. Default: 104857600 (100 MiB).");
ABSL_FLAG(int64_t, partition_bytes, 4 << 20,
          "Partition size in bytes (FLOAT32). Default: 4194304 (4 MiB).");
ABSL_FLAG(int, nodes, 3, "Node streams pushing and pulling concurrently. Default: 3.");
ABSL_FLAG(int, steps, 5, "Timed SYNC steps. Default: 5.");
ABSL_FLAG(int, warmup_steps, 2,
          "Untimed SYNC steps first (first-touch page faults, HTTP/2 window growth). "
          "Default: 2.");
ABSL_FLAG(int, summation_threads, 0,
          "Shard summation threads; 0: one per CPU core. Default: 0.");
ABSL_FLAG(std::string, wire_dtype, "FLOAT32",
          "Gradient dtype on the wire: FLOAT32, FLOAT16 or BFLOAT16. Default: FLOAT32.");
ABSL_FLAG(int, malloc_arena_max, 1,
          "glibc malloc arenas, as the shard's flag of that name (0: glibc default). "
          "Default: 1.");
ABSL_FLAG(bool, ps_only, false,
          "Measure only the PS (for profiling); ratios are then omitted. Default: false.");
ABSL_FLAG(int, repeats, 3,
          "Repetitions of the memcpy / TCP / sum measurements (best is reported). Default: 3.");

namespace tributary::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --- memcpy ---------------------------------------------------------------------

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
  if (target[3] != 3) LOG(FATAL) << "memcpy check";
  return best;
}

// --- raw TCP --------------------------------------------------------------------

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) PLOG(FATAL) << "send";
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void ReadAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n <= 0) PLOG(FATAL) << "recv";
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
    PLOG(FATAL) << "listen";
  }
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    PLOG(FATAL) << "connect";
  }
  const int server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  const int one = 1;
  for (int fd : {client, server}) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {client, server};
}

// N connections; each client sends `steps` x model in chunks and receives every chunk
// back from its server thread (the PS's push + pull pattern without any processing).
double RawTcpGBps(size_t model_bytes, size_t chunk, int nodes, int steps) {
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < nodes; ++i) pairs.push_back(TcpPair());
  const size_t chunks = (model_bytes + chunk - 1) / chunk;
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  const auto wait_go = [&] {
    ready.fetch_add(1);
    while (!go.load()) std::this_thread::yield();
  };
  for (auto [client, server] : pairs) {
    threads.emplace_back([&, server = server] {  // Echo server.
      std::vector<char> buffer(chunk);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          const size_t n = std::min(chunk, model_bytes - c * chunk);
          ReadAll(server, buffer.data(), n);
          WriteAll(server, buffer.data(), n);
        }
      }
    });
    threads.emplace_back([&, client = client] {  // Client sender.
      std::vector<char> buffer(chunk, 7);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          WriteAll(client, buffer.data(), std::min(chunk, model_bytes - c * chunk));
        }
      }
    });
    threads.emplace_back([&, client = client] {  // Client receiver.
      std::vector<char> buffer(chunk);
      wait_go();
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < chunks; ++c) {
          ReadAll(client, buffer.data(), std::min(chunk, model_bytes - c * chunk));
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
  return 2.0 * nodes * steps * static_cast<double>(model_bytes) / seconds / 1e9;
}

// --- summation loop alone -----------------------------------------------------------

double SumGBps(size_t model_bytes, v1::DType dtype, int repeats) {
  const size_t floats = model_bytes / 4;
  std::vector<char> wire(floats * ps::WireBytes(dtype), 0);
  std::vector<float> ones(floats, 0.5f);
  ps::NarrowInto(dtype, ones.data(), floats, wire.data());
  std::vector<float> sum(floats, 0.0f);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < 4; ++i) ps::AccumulateInto(dtype, wire.data(), floats, sum.data());
    best = std::max(best, 4.0 * wire.size() / SecondsSince(start) / 1e9);
  }
  return best;
}

// --- the parameter server -----------------------------------------------------------

struct PsResult {
  double gbps = 0;
  double step_seconds = 0;
  double aggregation_wait_seconds = 0;
};

PsResult PsGBps(int64_t model_bytes, int64_t partition_bytes, int nodes, int warmup, int steps,
                int threads, v1::DType dtype) {
  ServerOptions server;
  server.name = "ps_bench";
  server.listen_address = "127.0.0.1:0";
  server.http_port = -1;
  server.drain_grace = absl::ZeroDuration();
  server.max_receive_bytes = MaxReceiveBytesForPartition(partition_bytes);
  ServiceHost host(server);
  ps::ShardOptions options;
  options.shard_index = 0;
  options.max_partition_bytes = partition_bytes;
  ps::ParameterShard shard(options, host.registry());
  ps::PartitionExecutor executor(threads);
  ps::ParameterServerService service(&shard, &executor);
  host.AddService(&service, v1::ParameterServer::service_full_name());
  CHECK(host.Start().ok());
  host.SetServing(true);

  // The job: one tensor of model_bytes, SGD, SYNC over `nodes` nodes, one shard.
  const int64_t elements = model_bytes / 4;
  v1::ParameterLayout layout;
  v1::TensorView* tensor = layout.add_tensors();
  tensor->set_name("weights");
  tensor->add_shape(elements);
  tensor->set_length(elements);
  layout.set_total_elements(elements);
  v1::InitHeader header;
  header.set_job_id("bench");
  v1::JobSpec& spec = *header.mutable_job();
  spec.set_mode(v1::SYNC);
  spec.set_nodes_min(nodes);
  spec.set_max_steps(warmup + steps);
  spec.set_partition_bytes(partition_bytes);
  spec.set_wire_dtype(dtype);
  spec.mutable_optimizer()->set_type(v1::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  *header.mutable_plan() = *MakePartitionPlan(layout, partition_bytes, 1);
  header.set_total_steps(warmup + steps);
  const v1::PartitionPlan& plan = header.plan();
  ChannelOptions channel_options;
  channel_options.max_receive_bytes = MaxReceiveBytesForPartition(partition_bytes);
  std::shared_ptr<grpc::Channel> init_channel =
      *MakeChannel(absl::StrCat("127.0.0.1:", host.grpc_port()), channel_options);
  {
    auto stub = v1::ParameterServer::NewStub(init_channel);
    grpc::ClientContext context;
    v1::InitPartitionsResponse response;
    auto writer = stub->InitPartitions(&context, &response);
    v1::InitPartitionsRequest request;
    *request.mutable_header() = header;
    writer->Write(request);
    for (const v1::Partition& partition : plan.partitions()) {
      v1::PartitionValues* values = request.mutable_initial();
      values->set_partition_id(partition.id());
      values->set_dtype(v1::FLOAT32);
      values->mutable_data()->assign(partition.length() * 4, '\0');
      writer->Write(request);
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    CHECK(status.ok()) << status.error_message();
  }

  // Each node: its own channel (its own TCP connection, like separate machines), its
  // pushes prepared once, one stream for all steps.
  struct Node {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::ParameterServer::Stub> stub;
    std::vector<v1::GradientPush> pushes;
  };
  std::vector<Node> node_state(nodes);
  for (int n = 0; n < nodes; ++n) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(static_cast<int>(channel_options.max_receive_bytes));
    arguments.SetInt("bench.node", n);  // Distinct arguments: a connection per node.
    node_state[n].channel = grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", host.grpc_port()), grpc::InsecureChannelCredentials(),
        arguments);
    node_state[n].stub = v1::ParameterServer::NewStub(node_state[n].channel);
    for (const v1::Partition& partition : plan.partitions()) {
      v1::GradientPush push;
      push.set_job_id("bench");
      push.set_node_rank(n);
      push.set_partition_id(partition.id());
      push.set_dtype(dtype);
      push.set_sample_count(1);
      std::vector<float> grad(partition.length(), 0.001f * (n + 1));
      std::string data(partition.length() * ps::WireBytes(dtype), '\0');
      ps::NarrowInto(dtype, grad.data(), grad.size(), data.data());
      push.set_data(std::move(data));
      node_state[n].pushes.push_back(std::move(push));
    }
  }

  std::atomic<int> arrived{0};
  std::atomic<int> generation_of_barrier{0};
  const auto barrier = [&](int round) {
    // All nodes start the timed steps together.
    if (arrived.fetch_add(1) + 1 == nodes * round) generation_of_barrier.store(round);
    while (generation_of_barrier.load() < round) std::this_thread::yield();
  };
  Clock::time_point start;
  std::vector<std::thread> node_threads;
  std::atomic<uint64_t> bytes{0};
  for (int n = 0; n < nodes; ++n) {
    node_threads.emplace_back([&, n] {
      Node& node = node_state[n];
      grpc::ClientContext context;
      auto stream = node.stub->PushPull(&context);
      v1::PartitionValues values;
      uint64_t moved = 0;
      for (int step = 0; step < warmup + steps; ++step) {
        const bool timed = step >= warmup;
        if (step == warmup) {
          barrier(1);
          if (n == 0) start = Clock::now();
          barrier(2);
        }
        // Push everything, reading updates as they come (like a pipelined node).
        size_t received = 0;
        for (v1::GradientPush& push : node.pushes) {
          push.set_step(step);
          CHECK(stream->Write(push));
          if (timed) moved += push.data().size();
        }
        while (received < node.pushes.size()) {
          CHECK(stream->Read(&values)) << "stream ended: " << stream->Finish().error_message();
          if (values.step() != static_cast<uint64_t>(step) + 1) continue;
          ++received;
          if (timed) moved += values.data().size();
        }
      }
      stream->WritesDone();
      const grpc::Status status = stream->Finish();
      CHECK(status.ok()) << status.error_message();
      bytes.fetch_add(moved);
    });
  }
  for (std::thread& thread : node_threads) thread.join();
  const double seconds = SecondsSince(start);
  PsResult result;
  result.gbps = static_cast<double>(bytes.load()) / seconds / 1e9;
  result.step_seconds = seconds / steps;
  result.aggregation_wait_seconds = shard.Status().aggregation_wait_seconds();
  host.Shutdown(absl::Seconds(2));
  return result;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the shard binary does (its --malloc_arena_max default); may re-execute.
  tributary::ps::TuneMallocForLargeMessages(argv, absl::GetFlag(FLAGS_malloc_arena_max));
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // The shard's INFO lines would interleave with the report.
  using namespace tributary;
  const int64_t model_bytes = absl::GetFlag(FLAGS_model_bytes);
  const int64_t partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  const int nodes = absl::GetFlag(FLAGS_nodes);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int warmup = std::max(0, absl::GetFlag(FLAGS_warmup_steps));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  int threads = absl::GetFlag(FLAGS_summation_threads);
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  v1::DType dtype;
  if (!v1::DType_Parse(absl::GetFlag(FLAGS_wire_dtype), &dtype) || ps::WireBytes(dtype) == 0) {
    std::fprintf(stderr, "--wire_dtype must be FLOAT32, FLOAT16 or BFLOAT16, got %s\n",
                 absl::GetFlag(FLAGS_wire_dtype).c_str());
    return 2;
  }
  if (model_bytes < 4 || model_bytes % 4 != 0 || partition_bytes < 4 || partition_bytes % 4 != 0 ||
      nodes < 1 || steps < 1) {
    std::fprintf(stderr,
                 "need --model_bytes and --partition_bytes positive multiples of 4, "
                 "--nodes >= 1, --steps >= 1\n");
    return 2;
  }
  std::printf("ps_bench: model %.1f MiB, partitions %.1f MiB, %d nodes, %d (+%d warm-up) steps, %d summation "
              "threads, wire %s, %u CPU cores\n",
              model_bytes / 1048576.0, partition_bytes / 1048576.0, nodes, steps, warmup, threads,
              v1::DType_Name(dtype).c_str(), std::thread::hardware_concurrency());
  std::fflush(stdout);

  if (absl::GetFlag(FLAGS_ps_only)) {
    const bench::PsResult ps = bench::PsGBps(model_bytes, partition_bytes, nodes, warmup, steps,
                                             threads, dtype);
    std::printf("PS:      %7.2f GB/s pushed + pulled (%.3f s per step)\n", ps.gbps,
                ps.step_seconds);
    std::printf("{\"ps_GBps\": %.4f, \"step_seconds\": %.4f}\n", ps.gbps, ps.step_seconds);
    return 0;
  }
  const double memcpy_gbps = bench::MemcpyGBps(static_cast<size_t>(model_bytes), repeats);
  std::printf("memcpy:  %7.2f GB/s (one thread)\n", memcpy_gbps);
  std::fflush(stdout);
  const double sum_gbps = bench::SumGBps(static_cast<size_t>(model_bytes), dtype, repeats);
  std::printf("sum:     %7.2f GB/s of %s gradient summed (one thread)\n", sum_gbps,
              v1::DType_Name(dtype).c_str());
  std::fflush(stdout);
  // The wire carries the narrow dtype up and FLOAT32 down; raw TCP moves FLOAT32 both
  // ways, which is the PS's pattern for FLOAT32 (compare FLOAT32 runs).
  double tcp_gbps = 0;
  for (int r = 0; r < repeats; ++r) {
    tcp_gbps = std::max(tcp_gbps, bench::RawTcpGBps(static_cast<size_t>(model_bytes),
                                                    static_cast<size_t>(partition_bytes), nodes,
                                                    std::max(1, steps / 2)));
  }
  std::printf("raw TCP: %7.2f GB/s (%d loopback connections, send + echo, bytes both ways)\n",
              tcp_gbps, nodes);
  std::fflush(stdout);
  const bench::PsResult ps =
      bench::PsGBps(model_bytes, partition_bytes, nodes, warmup, steps, threads, dtype);
  std::printf("PS:      %7.2f GB/s pushed + pulled (%.3f s per step, mean aggregation wait "
              "%.3f s)\n",
              ps.gbps, ps.step_seconds, ps.aggregation_wait_seconds);
  std::printf("ratios:  PS/raw TCP %.3f, PS/memcpy %.3f, sum/memcpy %.3f\n", ps.gbps / tcp_gbps,
              ps.gbps / memcpy_gbps, sum_gbps / memcpy_gbps);
  std::printf(
      "{\"ps_GBps\": %.4f, \"raw_tcp_GBps\": %.4f, \"memcpy_GBps\": %.4f, \"sum_GBps\": %.4f, "
      "\"ratio_vs_raw_tcp\": %.4f, \"ratio_vs_memcpy\": %.4f, \"step_seconds\": %.4f, "
      "\"model_bytes\": %lld, \"partition_bytes\": %lld, \"nodes\": %d, \"steps\": %d, "
      "\"summation_threads\": %d, \"wire_dtype\": \"%s\", \"cpu_cores\": %u}\n",
      ps.gbps, tcp_gbps, memcpy_gbps, sum_gbps, ps.gbps / tcp_gbps, ps.gbps / memcpy_gbps,
      ps.step_seconds, static_cast<long long>(model_bytes), static_cast<long long>(partition_bytes),
      nodes, steps, threads, v1::DType_Name(dtype).c_str(), std::thread::hardware_concurrency());
  return 0;
}
