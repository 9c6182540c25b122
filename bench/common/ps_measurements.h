// What ps_bench and ps_throughput measure, in one process on loopback: memcpy and the
// summation loop (the machine's memory limits), raw TCP moving the PS's traffic
// pattern, and real parameter server shards (gRPC server, executor, SYNC aggregation,
// SGD) with node streams pushing the model and pulling the new values each step.
#ifndef TRIBUTARY_BENCH_COMMON_PS_MEASUREMENTS_H_
#define TRIBUTARY_BENCH_COMMON_PS_MEASUREMENTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tensor.pb.h"
#include "worker/comm/ps_client.h"

namespace tributary::bench {

// Single-thread copy bandwidth over `bytes`, best of `repeats` (GB/s copied).
double MemcpyGBps(size_t bytes, int repeats);

// The shard's summation loop alone: `model_bytes` of FLOAT32 gradient sent as `dtype`
// summed into a float buffer, best of `repeats` (GB/s of wire bytes summed).
double SumGBps(size_t model_bytes, v1::DType dtype, int repeats);

// Plain sockets over 127.0.0.1, one connection per entry of `bytes_per_connection`:
// each client sends its bytes `steps` times in `chunk`-sized pieces and its server
// echoes every piece back (the PS's push + pull without any processing). All
// connections run at once. GB/s of bytes sent + received.
double RawTcpGBps(const std::vector<size_t>& bytes_per_connection, size_t chunk, int steps);
// The same over Unix stream socket pairs: what the shards' local socket is made of.
double RawUnixGBps(const std::vector<size_t>& bytes_per_connection, size_t chunk, int steps);

struct PsConfig {
  int64_t model_bytes = 100 << 20;  // One FLOAT32 tensor of this size.
  int64_t partition_bytes = 4 << 20;
  int nodes = 3;                       // Node streams, each with its own channel per shard.
  int shards = 1;                      // In-process shards, each its own gRPC server.
  int warmup_steps = 2;                // Untimed steps first.
  int steps = 5;                       // Timed steps.
  int summation_threads = 1;           // Executor threads of each shard.
  v1::DType wire_dtype = v1::FLOAT32;  // Gradient dtype on the wire (updates: FLOAT32).
  int streams_per_shard = 1;           // PsClient's PushPull streams (connections) per shard.
  // How pushes and updates travel: each shard runs its data plane (TCP port and local
  // socket) beside gRPC.
  worker::PsTransport transport = worker::PsTransport::kTcp;
  // On the local socket: the bytes through a region shared with the shard.
  bool shared_memory = false;
};

struct PsResult {
  double gbps = 0;                      // Bytes pushed + pulled per second, all nodes.
  double step_seconds = 0;              // Mean wall time of a timed step.
  double aggregation_wait_seconds = 0;  // The shards' mean aggregation wait.
  // Bytes each connection (node, shard, stream) moves up per step (FLOAT32): the raw
  // TCP figure of the same traffic uses these.
  std::vector<size_t> stream_bytes;
};

// Starts `shards` shards on loopback, installs a SYNC SGD job over `nodes` nodes,
// runs the steps with one stream per (node, shard), shuts the shards down.
// INVALID_ARGUMENT for a bad config, the shard's or gRPC's error otherwise.
absl::StatusOr<PsResult> MeasurePs(const PsConfig& config);

// Bytes per connection for `config` without running anything: the plan's FLOAT32
// bytes of each (node, shard, stream), a shard's partitions dealt among its
// streams_per_shard streams in turn (as PsClient deals them).
absl::StatusOr<std::vector<size_t>> StreamBytes(const PsConfig& config);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_PS_MEASUREMENTS_H_
