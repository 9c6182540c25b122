// ps_throughput: the parameter server's push + pull throughput swept over the number
// of workers (node streams) and PS shards, each configuration beside raw sockets
// moving the same traffic (one connection per (worker, shard), each carrying that
// shard's bytes up and back: loopback TCP for the tcp and grpc transports, Unix socket
// pairs for local and shared) and beside single-thread memcpy, all measured in this run
// and in this process. Prints a table of figures and ratios, then one JSON line.
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/machine.h"
#include "bench/common/ps_measurements.h"
#include "services/parameter_server/malloc_tuning.h"
#include "common/wire_dtype.h"

ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"1", "2", "4"}),
          "Worker counts to sweep: node streams pushing and pulling at once, each on its own "
          "connection per shard. Comma separated. Default: 1,2,4.");
ABSL_FLAG(std::vector<std::string>, shards, std::vector<std::string>({"1", "2"}),
          "PS shard counts to sweep (in-process shards, each its own gRPC server and "
          "executor; partitions balanced by bytes). Comma separated. Default: 1,2.");
ABSL_FLAG(int64_t, model_bytes, 64 << 20,
          "Model size in bytes of FLOAT32 parameters. Default: 67108864 (64 MiB).");
ABSL_FLAG(int64_t, partition_bytes, 4 << 20,
          "Partition size in bytes (FLOAT32). Default: 4194304 (4 MiB).");
ABSL_FLAG(int, steps, 4, "Timed SYNC steps per configuration. Default: 4.");
ABSL_FLAG(int, warmup_steps, 1,
          "Untimed SYNC steps before them (first-touch page faults, HTTP/2 window growth). "
          "Default: 1.");
ABSL_FLAG(int, summation_threads, 0,
          "Summation threads of each shard; 0: one per CPU core, as the shard binary. "
          "Default: 0.");
ABSL_FLAG(std::string, wire_dtype, "FLOAT32",
          "Gradient dtype on the wire: FLOAT32, FLOAT16 or BFLOAT16. Default: FLOAT32.");
ABSL_FLAG(int, malloc_arena_max, 1,
          "glibc malloc arenas, as the shard binary's flag of that name (0: glibc default). "
          "Default: 1.");
ABSL_FLAG(int, streams_per_shard, 1,
          "PushPull streams from each worker to each shard, each on its own connection (the "
          "worker's --ps_streams_per_shard); raw TCP uses as many connections. Default: 1.");
ABSL_FLAG(std::vector<std::string>, transports,
          std::vector<std::string>({"shared", "local", "tcp", "grpc"}),
          "How pushes and updates travel, each measured per configuration: shared (the "
          "shards' local Unix socket with the bytes through a region shared with the shard, "
          "what workers on the shards' host use by default), local (the local socket with "
          "the bytes in it: --ps_shared_memory=false), tcp (the data plane's TCP port, what "
          "workers elsewhere use) and/or grpc (the gRPC PushPull stream). Comma separated. "
          "Default: shared,local,tcp,grpc.");
ABSL_FLAG(int, repeats, 3,
          "Repetitions of every measurement: memcpy, summation, and per configuration raw "
          "sockets and each transport in turn; the best of each is reported. Default: 3.");

namespace tributary::bench {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps_throughput: %s\n", status.ToString().c_str());
  return 1;
}

absl::StatusOr<std::vector<int>> ParseCounts(const char* flag,
                                             const std::vector<std::string>& values) {
  std::vector<int> counts;
  for (const std::string& value : values) {
    int count = 0;
    if (!absl::SimpleAtoi(value, &count) || count < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", absl::StrJoin(values, ","),
                                                     ": '", value, "' is not a positive integer"));
    }
    counts.push_back(count);
  }
  if (counts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": needs at least one count"));
  }
  return counts;
}

struct Row {
  int workers = 0;
  int shards = 0;
  std::string transport;
  PsResult ps;
  double tcp_gbps = 0;   // Raw loopback TCP.
  double unix_gbps = 0;  // Raw Unix socket pairs (0 when no local transport was measured).
  double raw_gbps = 0;   // The raw figure of this row's kind of socket.
};

int Run() {
  absl::StatusOr<std::vector<int>> workers = ParseCounts("workers", absl::GetFlag(FLAGS_workers));
  if (!workers.ok()) return Fail(workers.status());
  absl::StatusOr<std::vector<int>> shards = ParseCounts("shards", absl::GetFlag(FLAGS_shards));
  if (!shards.ok()) return Fail(shards.status());
  PsConfig base;
  base.model_bytes = absl::GetFlag(FLAGS_model_bytes);
  base.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  base.steps = absl::GetFlag(FLAGS_steps);
  base.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  base.streams_per_shard = absl::GetFlag(FLAGS_streams_per_shard);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  base.summation_threads = absl::GetFlag(FLAGS_summation_threads);
  if (base.summation_threads <= 0) base.summation_threads = static_cast<int>(cores);
  if (!v1::DType_Parse(absl::GetFlag(FLAGS_wire_dtype), &base.wire_dtype) ||
      WireBytes(base.wire_dtype) == 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype must be FLOAT32, FLOAT16 or BFLOAT16, got ",
                     absl::GetFlag(FLAGS_wire_dtype))));
  }
  std::vector<worker::PsTransport> transports;
  std::vector<bool> shared;  // By transport: "shared" (the local socket, shared memory).
  for (const std::string& name : absl::GetFlag(FLAGS_transports)) {
    absl::StatusOr<worker::PsTransport> transport =
        name == "shared" ? worker::PsTransport::kLocal : worker::ParsePsTransport(name);
    if (!transport.ok() || *transport == worker::PsTransport::kAuto) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--transports: '", name, "' is not shared, local, tcp or grpc")));
    }
    transports.push_back(*transport);
    shared.push_back(name == "shared");
  }
  if (transports.empty()) return Fail(absl::InvalidArgumentError("--transports: none given"));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const std::string dtype = v1::DType_Name(base.wire_dtype);
  if (absl::StatusOr<std::vector<size_t>> valid = StreamBytes(base); !valid.ok()) {
    return Fail(valid.status());
  }

  const MachineInfo machine = DescribeMachine();
  std::printf("ps_throughput: %s\n", MachineLine(machine).c_str());
  std::printf(
      "ps_throughput: model %.1f MiB, partitions %.1f MiB, workers {%s} x shards {%s}, %d (+%d "
      "warm-up) steps each, %d summation threads per shard, wire %s, %u CPU cores\n",
      base.model_bytes / 1048576.0, base.partition_bytes / 1048576.0,
      absl::StrJoin(*workers, ",").c_str(), absl::StrJoin(*shards, ",").c_str(), base.steps,
      base.warmup_steps, base.summation_threads, dtype.c_str(), cores);
  std::fflush(stdout);
  const double memcpy_gbps = MemcpyGBps(static_cast<size_t>(base.model_bytes), repeats);
  const double sum_gbps = SumGBps(static_cast<size_t>(base.model_bytes), base.wire_dtype, repeats);
  std::printf("memcpy %.2f GB/s (one thread), summation %.2f GB/s of %s gradient (one thread)\n",
              memcpy_gbps, sum_gbps, dtype.c_str());
  std::printf("%7s %6s %9s  %10s  %13s  %8s  %9s  %10s  %9s\n", "workers", "shards",
              "transport", "PS GB/s", "raw GB/s", "PS/raw", "PS/memcpy", "step s", "agg wait");
  std::printf("(raw: the same bytes through plain sockets of the transport's kind: loopback TCP "
              "for tcp and grpc, Unix socket pairs for local and shared)\n");
  std::fflush(stdout);

  std::vector<Row> rows;
  for (int shard_count : *shards) {
    for (int worker_count : *workers) {
      PsConfig config = base;
      config.nodes = worker_count;
      config.shards = shard_count;
      absl::StatusOr<std::vector<size_t>> stream_bytes = StreamBytes(config);
      if (!stream_bytes.ok()) return Fail(stream_bytes.status());
      // Raw TCP and each transport take turns, `repeats` rounds, and each reports its
      // best round: both sides get the same treatment and the same moments of a noisy
      // machine.
      double tcp_gbps = 0;
      double unix_gbps = 0;
      // "shared" is the local socket too.
      const bool any_local =
          std::count(transports.begin(), transports.end(), worker::PsTransport::kLocal) > 0;
      std::vector<PsResult> best(transports.size());
      for (int r = 0; r < repeats; ++r) {
        const size_t chunk = static_cast<size_t>(config.partition_bytes);
        const int raw_steps = std::max(1, config.steps / 2);
        tcp_gbps = std::max(tcp_gbps, RawTcpGBps(*stream_bytes, chunk, raw_steps));
        if (any_local) {
          unix_gbps = std::max(unix_gbps, RawUnixGBps(*stream_bytes, chunk, raw_steps));
        }
        for (size_t t = 0; t < transports.size(); ++t) {
          config.transport = transports[t];
          config.shared_memory = shared[t];
          absl::StatusOr<PsResult> ps = MeasurePs(config);
          if (!ps.ok()) {
            return Fail(absl::Status(
                ps.status().code(),
                absl::StrCat(worker_count, " workers x ", shard_count, " shards (",
                             shared[t] ? "shared" : worker::PsTransportName(transports[t]),
                             "): ", ps.status().message())));
          }
          if (ps->gbps > best[t].gbps) best[t] = *ps;
        }
      }
      for (size_t t = 0; t < transports.size(); ++t) {
        Row row;
        row.workers = worker_count;
        row.shards = shard_count;
        row.transport = shared[t] ? "shared" : worker::PsTransportName(transports[t]);
        row.tcp_gbps = tcp_gbps;
        row.unix_gbps = unix_gbps;
        row.raw_gbps = transports[t] == worker::PsTransport::kLocal ? unix_gbps : tcp_gbps;
        row.ps = best[t];
        std::printf("%7d %6d %9s  %10.3f  %13.3f  %8.3f  %9.3f  %10.3f  %9.3f\n", row.workers,
                    row.shards, row.transport.c_str(), row.ps.gbps, row.raw_gbps,
                    row.ps.gbps / row.raw_gbps, row.ps.gbps / memcpy_gbps, row.ps.step_seconds,
                    row.ps.aggregation_wait_seconds);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }

  std::vector<std::string> runs;
  for (const Row& row : rows) {
    runs.push_back(absl::StrFormat(
        "{\"workers\": %d, \"shards\": %d, \"transport\": \"%s\", \"ps_GBps\": %.4f, "
        "\"raw_tcp_GBps\": %.4f, \"raw_unix_GBps\": %.4f, \"ratio_vs_raw\": %.4f, "
        "\"ratio_vs_raw_tcp\": %.4f, \"ratio_vs_memcpy\": %.4f, \"step_seconds\": %.4f, "
        "\"aggregation_wait_seconds\": %.4f}",
        row.workers, row.shards, row.transport, row.ps.gbps, row.tcp_gbps, row.unix_gbps,
        row.ps.gbps / row.raw_gbps, row.ps.gbps / row.tcp_gbps,
        row.ps.gbps / memcpy_gbps, row.ps.step_seconds, row.ps.aggregation_wait_seconds));
  }
  const MachineInfo after = DescribeMachine();
  absl::PrintF(
      "{\"bench\": \"ps_throughput\", %s, "
      "\"memcpy_GBps\": %.4f, \"sum_GBps\": %.4f, \"model_bytes\": %d, \"partition_bytes\": %d, "
      "\"steps\": %d, \"warmup_steps\": %d, \"summation_threads\": %d, "
      "\"streams_per_shard\": %d, \"wire_dtype\": \"%s\", \"runs\": [%s]}\n",
      MachineJsonMembers(machine, after), memcpy_gbps, sum_gbps, base.model_bytes,
      base.partition_bytes, base.steps, base.warmup_steps, base.summation_threads,
      base.streams_per_shard, dtype, absl::StrJoin(runs, ", "));
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ps_throughput: PS push + pull bytes/s for each (workers, shards) beside raw sockets "
      "(loopback TCP, Unix) and memcpy.\n"
      "Usage: bazel run //bench/ps_throughput -- [--workers=1,2,4] [--shards=1,2] "
      "[--model_bytes=N] [--steps=N] ...");
  absl::ParseCommandLine(argc, argv);
  // As the shard binary does (its --malloc_arena_max default); may re-execute.
  tributary::ps::TuneMallocForLargeMessages(argv, absl::GetFlag(FLAGS_malloc_arena_max));
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // The shards' INFO lines would interleave with the table.
  return tributary::bench::Run();
}
