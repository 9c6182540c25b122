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
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/flags/parse.h"
#include "bench/common/ps_measurements.h"
#include "services/parameter_server/malloc_tuning.h"
#include "common/wire_dtype.h"

ABSL_FLAG(int64_t, model_bytes, 100 << 20,
          "Model size in bytes of FLOAT32 parameters. Default: 104857600 (100 MiB).");
ABSL_FLAG(int64_t, partition_bytes, 4 << 20,
          "Partition size in bytes (FLOAT32). Default: 4194304 (4 MiB).");
ABSL_FLAG(int, nodes, 3, "Node streams pushing and pulling concurrently. Default: 3.");
ABSL_FLAG(int, steps, 5, "Timed SYNC steps. Default: 5.");
ABSL_FLAG(int, warmup_steps, 2,
          "Untimed SYNC steps first (first-touch page faults, HTTP/2 window growth). "
          "Default: 2.");
ABSL_FLAG(int, summation_threads, 0, "Shard summation threads; 0: one per CPU core. Default: 0.");
ABSL_FLAG(std::string, wire_dtype, "FLOAT32",
          "Gradient dtype on the wire: FLOAT32, FLOAT16 or BFLOAT16. Default: FLOAT32.");
ABSL_FLAG(int, malloc_arena_max, 1,
          "glibc malloc arenas, as the shard's flag of that name (0: glibc default). "
          "Default: 1.");
ABSL_FLAG(std::string, transport, "tcp",
          "How the nodes push and pull: tcp (the shard's TCP data plane, the workers' "
          "default) or grpc (the gRPC PushPull stream). Default: tcp.");
ABSL_FLAG(bool, ps_only, false,
          "Measure only the PS (for profiling); ratios are then omitted. Default: false.");
ABSL_FLAG(int, repeats, 3,
          "Repetitions of the memcpy / TCP / sum measurements (best is reported). Default: 3.");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_bench: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the shard binary does (its --malloc_arena_max default); may re-execute.
  tributary::ps::TuneMallocForLargeMessages(argv, absl::GetFlag(FLAGS_malloc_arena_max));
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // The shard's INFO lines would interleave with the report.
  using namespace tributary;
  bench::PsConfig config;
  config.model_bytes = absl::GetFlag(FLAGS_model_bytes);
  config.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  config.nodes = absl::GetFlag(FLAGS_nodes);
  config.shards = 1;
  absl::StatusOr<tributary::worker::PsTransport> transport =
      tributary::worker::ParsePsTransport(absl::GetFlag(FLAGS_transport));
  if (!transport.ok() || *transport == tributary::worker::PsTransport::kAuto) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--transport=", absl::GetFlag(FLAGS_transport), ": expected tcp or grpc")));
  }
  config.transport = *transport;
  config.steps = absl::GetFlag(FLAGS_steps);
  config.warmup_steps = std::max(0, absl::GetFlag(FLAGS_warmup_steps));
  config.summation_threads = absl::GetFlag(FLAGS_summation_threads);
  if (config.summation_threads <= 0) {
    config.summation_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  if (!v1::DType_Parse(absl::GetFlag(FLAGS_wire_dtype), &config.wire_dtype) ||
      WireBytes(config.wire_dtype) == 0) {
    std::fprintf(stderr, "ps_bench: --wire_dtype must be FLOAT32, FLOAT16 or BFLOAT16, got %s\n",
                 absl::GetFlag(FLAGS_wire_dtype).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<size_t>> stream_bytes = bench::StreamBytes(config);
  if (!stream_bytes.ok()) return Fail(stream_bytes.status());
  const int64_t model_bytes = config.model_bytes;
  const std::string dtype = v1::DType_Name(config.wire_dtype);
  std::printf(
      "ps_bench: model %.1f MiB, partitions %.1f MiB, %d nodes, %d (+%d warm-up) steps, %d "
      "summation threads, wire %s, %u CPU cores\n",
      model_bytes / 1048576.0, config.partition_bytes / 1048576.0, config.nodes, config.steps,
      config.warmup_steps, config.summation_threads, dtype.c_str(),
      std::thread::hardware_concurrency());
  std::fflush(stdout);

  if (absl::GetFlag(FLAGS_ps_only)) {
    absl::StatusOr<bench::PsResult> ps = bench::MeasurePs(config);
    if (!ps.ok()) return Fail(ps.status());
    std::printf("PS:      %7.2f GB/s pushed + pulled (%.3f s per step)\n", ps->gbps,
                ps->step_seconds);
    std::printf("{\"ps_GBps\": %.4f, \"step_seconds\": %.4f}\n", ps->gbps, ps->step_seconds);
    return 0;
  }
  const double memcpy_gbps = bench::MemcpyGBps(static_cast<size_t>(model_bytes), repeats);
  std::printf("memcpy:  %7.2f GB/s (one thread)\n", memcpy_gbps);
  std::fflush(stdout);
  const double sum_gbps =
      bench::SumGBps(static_cast<size_t>(model_bytes), config.wire_dtype, repeats);
  std::printf("sum:     %7.2f GB/s of %s gradient summed (one thread)\n", sum_gbps, dtype.c_str());
  std::fflush(stdout);
  // The wire carries the narrow dtype up and FLOAT32 down; raw TCP moves FLOAT32 both
  // ways, which is the PS's pattern for FLOAT32 (compare FLOAT32 runs).
  double tcp_gbps = 0;
  for (int r = 0; r < repeats; ++r) {
    tcp_gbps = std::max(
        tcp_gbps, bench::RawTcpGBps(*stream_bytes, static_cast<size_t>(config.partition_bytes),
                                    std::max(1, config.steps / 2)));
  }
  std::printf("raw TCP: %7.2f GB/s (%d loopback connections, send + echo, bytes both ways)\n",
              tcp_gbps, config.nodes);
  std::fflush(stdout);
  absl::StatusOr<bench::PsResult> ps = bench::MeasurePs(config);
  if (!ps.ok()) return Fail(ps.status());
  std::printf(
      "PS:      %7.2f GB/s pushed + pulled over %s (%.3f s per step, mean aggregation wait "
      "%.3f s)\n",
      ps->gbps, absl::GetFlag(FLAGS_transport).c_str(), ps->step_seconds,
      ps->aggregation_wait_seconds);
  std::printf("ratios:  PS/raw TCP %.3f, PS/memcpy %.3f, sum/memcpy %.3f\n", ps->gbps / tcp_gbps,
              ps->gbps / memcpy_gbps, sum_gbps / memcpy_gbps);
  std::printf(
      "{\"ps_GBps\": %.4f, \"raw_tcp_GBps\": %.4f, \"memcpy_GBps\": %.4f, \"sum_GBps\": %.4f, "
      "\"ratio_vs_raw_tcp\": %.4f, \"ratio_vs_memcpy\": %.4f, \"step_seconds\": %.4f, "
      "\"model_bytes\": %lld, \"partition_bytes\": %lld, \"nodes\": %d, \"steps\": %d, "
      "\"summation_threads\": %d, \"wire_dtype\": \"%s\", \"transport\": \"%s\", "
      "\"cpu_cores\": %u}\n",
      ps->gbps, tcp_gbps, memcpy_gbps, sum_gbps, ps->gbps / tcp_gbps, ps->gbps / memcpy_gbps,
      ps->step_seconds, static_cast<long long>(model_bytes),
      static_cast<long long>(config.partition_bytes), config.nodes, config.steps,
      config.summation_threads, dtype.c_str(), absl::GetFlag(FLAGS_transport).c_str(),
      std::thread::hardware_concurrency());
  return 0;
}
