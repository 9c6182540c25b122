// engine_bench: samples/s of forward+backward for each registered model at batch 64
// and 256 on one replica, and the MLP's achieved GFLOP/s against an Eigen sgemm
// (1024 x 1024 x 1024 on every thread at once) timed in the same run, after the
// batch gather against a plain copy and a contiguous memcpy. The last line
// is one JSON object with every number. With --torch_python (default /usr/bin/python3)
// PyTorch runs the same models on the same device and thread count afterwards
// (torch_engine.py), and each row gets its ratio to PyTorch; without torch the rows say so.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_runfiles.h"
#include "bench/common/compute_only.h"
#include "common/child_process.h"
#include "common/cpu_check.h"
#include "common/process.h"
#include "common/tls.h"
#include "proto/job.pb.h"
#include "worker/engine/counter_rng.h"
#include "worker/engine/cpu_executor.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/replica_factory.h"

ABSL_FLAG(int, threads, 0, "Threads for matrix products; 0 = all cores. Default: 0.");
ABSL_FLAG(double, min_seconds, 1.0,
          "Time each measurement for at least this long (seconds; best of 5 windows). "
          "Default: 1.0.");
ABSL_FLAG(std::string, device, "cpu",
          "cpu or gpu (gpu needs --config=cuda and a device). Default: cpu.");
ABSL_FLAG(std::string, torch_python, "/usr/bin/python3",
          "Python that runs PyTorch on the same models for the side-by-side ratio; empty = "
          "skip PyTorch. Default: /usr/bin/python3.");

namespace tributary::engine {
namespace {

using bench::TimePerCall;

// The machine's sgemm throughput on `threads` cores: each thread multiplies its own
// pair of n x n matrices with single-threaded Eigen (the engine's kernel), all at
// once, so the figure carries no parallelisation overhead.
double SgemmGflops(int n, int threads, double min_seconds) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<Matrix> a, b, c;
  for (int t = 0; t < threads; ++t) {
    a.push_back(Matrix::Random(n, n));
    b.push_back(Matrix::Random(n, n));
    c.push_back(Matrix(n, n));
  }
  const double seconds = TimePerCall(
      [&] {
        std::vector<std::thread> workers;
        for (int t = 1; t < threads; ++t) {
          workers.emplace_back([&, t] { c[t].noalias() = a[t] * b[t]; });
        }
        c[0].noalias() = a[0] * b[0];
        for (std::thread& w : workers) w.join();
      },
      min_seconds);
  return 2.0 * n * n * n * threads / seconds / 1e9;
}

// The same measurement with OpenBLAS's cblas_sgemm (one thread each), loaded at run
// time so that the benchmark needs no BLAS to build: -1 when libopenblas.so.0 is absent.
double OpenBlasSgemmGflops(int n, int threads, double min_seconds) {
  void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return -1;
  // cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) with
  // CblasRowMajor = 101, CblasNoTrans = 111.
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                         int, float, float*, int);
  using SetThreads = void (*)(int);
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(library, "cblas_sgemm"));
  auto set_threads = reinterpret_cast<SetThreads>(dlsym(library, "openblas_set_num_threads"));
  if (sgemm == nullptr) return -1;
  if (set_threads != nullptr) set_threads(1);
  std::vector<std::vector<float>> a, b, c;
  for (int t = 0; t < threads; ++t) {
    a.emplace_back(static_cast<size_t>(n) * n, 0.5f + 0.01f * t);
    b.emplace_back(static_cast<size_t>(n) * n, 0.25f);
    c.emplace_back(static_cast<size_t>(n) * n);
  }
  auto one = [&](int t) {
    sgemm(101, 111, 111, n, n, n, 1.0f, a[t].data(), n, b[t].data(), n, 0.0f, c[t].data(), n);
  };
  const double seconds = TimePerCall(
      [&] {
        std::vector<std::thread> workers;
        for (int t = 1; t < threads; ++t) workers.emplace_back(one, t);
        one(0);
        for (std::thread& w : workers) w.join();
      },
      min_seconds);
  return 2.0 * n * n * n * threads / seconds / 1e9;
}

v1::ModelSpec Spec(const std::string& name) {
  v1::ModelSpec spec;
  spec.set_name(name);
  if (name == "logreg") {
    for (uint32_t s : {784, 10}) spec.add_layer_sizes(s);
  } else if (name == "mlp") {
    for (uint32_t s : {784, 256, 128, 10}) spec.add_layer_sizes(s);
  } else {
    for (uint32_t s : {128, 10}) spec.add_layer_sizes(s);
    for (uint32_t s : {32, 64}) spec.add_conv_channels(s);
    for (uint32_t s : {1, 28, 28}) spec.add_input_shape(s);
  }
  return spec;
}

// Floating-point operations of one sample's forward + backward: 2 per multiply-add
// forward, and backward twice that except for the first layer's input gradient.
double FlopsPerSample(const ModelDef& model) {
  double forward = 0, first = 0;
  for (const LayerSpec& l : model.layers) {
    double macs = 0;
    if (l.kind == LayerKind::kLinear) macs = double(l.in.size()) * l.out.size();
    if (l.kind == LayerKind::kConv2d) {
      macs = double(l.out.size()) * l.in.channels * l.kernel * l.kernel;
    }
    if (macs > 0 && first == 0) first = macs;
    forward += macs;
  }
  return 2 * forward + 2 * forward + 2 * (forward - first);
}

// The batch gather every training step runs (Dataset::Gather): 64 samples at random
// places of a Fashion-MNIST-sized dataset (60,000 x 784 floats and their labels), against
// the plain row-by-row copy of the same samples (what Gather did before it prefetched
// the next row) and a memcpy of as many bytes from one contiguous place (the floor).
// The three are timed in turns, twice, over the same random batches; best of each.
struct GatherFigures {
  double gather_us = 0;
  double plain_us = 0;
  double memcpy_us = 0;
};

GatherFigures MeasureGather(double min_seconds) {
  const Dataset data = MakeSynthetic(1, 0, 60000, 784, 10);
  const int64_t width = data.feature_size();
  const int64_t samples = data.size();
  constexpr int kBatch = 64;
  constexpr int kBatches = 4096;
  std::mt19937_64 random(7);
  std::uniform_int_distribution<uint64_t> pick(0, static_cast<uint64_t>(samples) - 1);
  std::vector<uint64_t> ids(static_cast<size_t>(kBatch) * kBatches);
  for (uint64_t& id : ids) id = pick(random);
  int next = 0;
  auto batch = [&]() { return ids.data() + static_cast<size_t>(next++ % kBatches) * kBatch; };
  BatchBuffer ours;
  std::vector<float> features(static_cast<size_t>(kBatch * width));
  std::vector<int32_t> labels(kBatch);
  int64_t block = 0;
  GatherFigures best{1e300, 1e300, 1e300};
  for (int round = 0; round < 2; ++round) {
    const double gather = TimePerCall([&] { data.Gather(batch(), kBatch, ours); }, min_seconds);
    const double plain = TimePerCall(
        [&] {
          const uint64_t* chosen = batch();
          for (int i = 0; i < kBatch; ++i) {
            const float* row = data.features.data() + chosen[i] * width;
            std::copy(row, row + width, features.data() + i * width);
            labels[i] = data.labels[chosen[i]];
          }
        },
        min_seconds);
    // Consecutive blocks through the whole dataset, so that the bytes come from memory
    // as the gathers' do, not from a cache that holds one block.
    const double contiguous = TimePerCall(
        [&] {
          const int64_t first = (block++ * kBatch) % (samples - kBatch);
          std::memcpy(features.data(), data.features.data() + first * width,
                      features.size() * sizeof(float));
        },
        min_seconds);
    best.gather_us = std::min(best.gather_us, gather * 1e6);
    best.plain_us = std::min(best.plain_us, plain * 1e6);
    best.memcpy_us = std::min(best.memcpy_us, contiguous * 1e6);
  }
  return best;
}

struct Result {
  std::string model;
  int batch;
  double samples_per_second;
  double gflops;
};

// PyTorch's samples/s per (model, batch), from torch_engine.py on the same device and
// threads, and its version; or why there are none.
struct TorchFigures {
  std::string version;
  std::map<std::pair<std::string, int>, double> samples_per_second;
};

absl::StatusOr<TorchFigures> MeasureTorch(const char* argv0, const std::string& python, bool gpu,
                                          int threads, double min_seconds) {
  absl::StatusOr<bench::BenchRunfiles> runfiles = bench::BenchRunfiles::Create(argv0);
  if (!runfiles.ok()) return runfiles.status();
  absl::StatusOr<std::string> script =
      runfiles->Find("tributary/bench/engine_bench/torch_engine.py");
  if (!script.ok()) return script.status();
  char log_template[] = "/tmp/engine_bench_torch_XXXXXX";
  const int fd = mkstemp(log_template);
  if (fd < 0) return absl::InternalError("cannot create a log file under /tmp");
  close(fd);
  const std::string log_path = log_template;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
      "torch_engine",
      {python, *script, absl::StrCat("--device=", gpu ? "cuda" : "cpu"),
       absl::StrCat("--threads=", threads), absl::StrCat("--min_seconds=", min_seconds)},
      log_path);
  if (!child.ok()) return child.status();
  if (!(*child)->Wait(absl::Seconds(60 + 12 * min_seconds))) {
    (*child)->KillGroup();
    return absl::DeadlineExceededError(
        absl::StrCat("torch_engine.py did not finish; log ", log_path));
  }
  absl::StatusOr<std::string> text = ReadFileToString(log_path);
  unlink(log_path.c_str());
  if (!text.ok()) return text.status();
  if ((*child)->exit_code() != 0) {
    return absl::UnavailableError(absl::StrCat(python, " torch_engine.py ",
                                               (*child)->ExitDescription(), ": ",
                                               absl::StripAsciiWhitespace(*text)));
  }
  TorchFigures figures;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() < 4 || words[0] != "torch_engine") continue;
    if (words[1] == "version") {
      figures.version = words[2];
      continue;
    }
    int batch = 0;
    double samples = 0;
    if (absl::SimpleAtoi(words[2], &batch) && absl::SimpleAtod(words[3], &samples)) {
      figures.samples_per_second[{words[1], batch}] = samples;
    }
  }
  if (figures.samples_per_second.empty()) {
    return absl::DataLossError(absl::StrCat("torch_engine.py printed no figures: ", *text));
  }
  return figures;
}

int Run(const char* argv0) {
  const int threads = absl::GetFlag(FLAGS_threads) > 0
                          ? absl::GetFlag(FLAGS_threads)
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  const bool gpu = absl::GetFlag(FLAGS_device) == "gpu";
  SetCpuMatmulThreads(threads);

  const double sgemm = SgemmGflops(1024, threads, min_seconds);
  std::printf("sgemm 1024x1024x1024 (Eigen %s, on %d threads at once): %.1f GFLOP/s\n",
              BuiltForAvx2AndFma() ? "with AVX2+FMA" : "without AVX2 (--config=portable)",
              threads, sgemm);
  const double openblas = OpenBlasSgemmGflops(1024, threads, min_seconds);
  if (openblas > 0) {
    std::printf("sgemm 1024x1024x1024 (OpenBLAS, on %d threads at once): %.1f GFLOP/s "
                "(Eigen %.2f of it)\n",
                threads, openblas, sgemm / openblas);
  } else {
    std::printf("sgemm (OpenBLAS): libopenblas.so.0 not found\n");
  }

  const GatherFigures gather = MeasureGather(min_seconds);
  const double batch_mb = 64 * 784 * sizeof(float) / 1e6;
  std::printf(
      "batch gather (64 random samples of 60000 x 784 floats, one thread): %.1f us (%.1f GB/s); "
      "plain row-by-row copy %.1f us (gather %.2f of its time); contiguous memcpy %.1f us "
      "(gather %.2fx it)\n",
      gather.gather_us, batch_mb / gather.gather_us * 1e3, gather.plain_us,
      gather.gather_us / gather.plain_us, gather.memcpy_us, gather.gather_us / gather.memcpy_us);

  std::vector<Result> results;
  for (const std::string name : {"logreg", "mlp", "cnn"}) {
    absl::StatusOr<ModelDef> model = BuildModel(Spec(name));
    if (!model.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", model.status().ToString().c_str());
      return 1;
    }
    for (int batch_size : {64, 256}) {
      absl::StatusOr<bench::ComputeOnly> measured = bench::MeasureComputeOnly(
          *model, gpu ? "gpu" : "cpu", batch_size, min_seconds);
      if (!measured.ok()) {
        std::fprintf(stderr, "engine_bench: %s batch %d: %s\n", name.c_str(), batch_size,
                     measured.status().ToString().c_str());
        return 1;
      }
      Result r{name, batch_size, measured->samples_per_second,
               measured->samples_per_second * FlopsPerSample(*model) / 1e9};
      std::printf("%-6s batch %3d on %s: %9.0f samples/s  %6.1f GFLOP/s (%.2f of sgemm)\n",
                  name.c_str(), batch_size, measured->device.c_str(), r.samples_per_second,
                  r.gflops, r.gflops / sgemm);
      results.push_back(r);
    }
  }

  std::vector<std::string> fields = {
      absl::StrFormat("\"device\":\"%s\"", gpu ? "gpu" : "cpu"),
      absl::StrFormat("\"threads\":%d", threads),
      absl::StrFormat("\"sgemm_gflops\":%.2f", sgemm),
      absl::StrFormat("\"openblas_sgemm_gflops\":%.2f", openblas),
      absl::StrFormat("\"gather_us\":%.2f", gather.gather_us),
      absl::StrFormat("\"plain_gather_us\":%.2f", gather.plain_us),
      absl::StrFormat("\"contiguous_memcpy_us\":%.2f", gather.memcpy_us)};
  const std::string python = absl::GetFlag(FLAGS_torch_python);
  if (!python.empty()) {
    absl::StatusOr<TorchFigures> torch = MeasureTorch(argv0, python, gpu, threads, min_seconds);
    if (!torch.ok()) {
      std::printf("PyTorch: not measured (%s)\n", torch.status().ToString().c_str());
    } else {
      std::printf("PyTorch %s, same models, device and threads:\n", torch->version.c_str());
      fields.push_back(absl::StrFormat("\"torch_version\":\"%s\"", torch->version));
      for (const Result& r : results) {
        auto it = torch->samples_per_second.find({r.model, r.batch});
        if (it == torch->samples_per_second.end()) continue;
        std::printf("%-6s batch %3d: PyTorch %9.0f samples/s; Tributary %.2fx PyTorch\n",
                    r.model.c_str(), r.batch, it->second, r.samples_per_second / it->second);
        fields.push_back(
            absl::StrFormat("\"torch_%s_b%d_samples_per_s\":%.1f", r.model, r.batch, it->second));
        fields.push_back(absl::StrFormat("\"%s_b%d_vs_torch\":%.3f", r.model, r.batch,
                                         r.samples_per_second / it->second));
      }
    }
  }
  for (const Result& r : results) {
    fields.push_back(
        absl::StrFormat("\"%s_b%d_samples_per_s\":%.1f", r.model, r.batch, r.samples_per_second));
    if (r.model == "mlp") {
      fields.push_back(absl::StrFormat("\"mlp_b%d_gflops\":%.2f", r.batch, r.gflops));
      fields.push_back(
          absl::StrFormat("\"mlp_b%d_fraction_of_sgemm\":%.3f", r.batch, r.gflops / sgemm));
    }
  }
  std::printf("{%s}\n", absl::StrJoin(fields, ",").c_str());
  return 0;
}

}  // namespace
}  // namespace tributary::engine

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv,
                         "engine_bench: forward+backward throughput of the engine's models.\n"
                         "Usage: engine_bench [--threads=N] [--min_seconds=S] [--device=cpu] "
                         "[--torch_python=/usr/bin/python3]");
  return tributary::engine::Run(argv[0]);
}
