// torchscript_bench: Tributary's TorchScript replica against PyTorch's own
// single-process training of the same file, on the same data, batch, optimizer and
// threads, measured one after the other in this run. The Tributary side is the
// single-process trainer (LocalTrainer: one TorchScript replica, the gradient sum
// divided by the batch, common/optimizer.h's Adam over the flat buffer); the PyTorch
// side is bench/torchscript/pytorch_train.py under /usr/bin/python3 (torch.jit.load,
// the same summed cross-entropy, torch.optim.Adam). Both skip the same warm-up steps.
// By default the model is the example CNN of examples/models.py (BatchNorm, dropout)
// on Fashion-MNIST converted by examples/fashion_to_npy.py. --example_model=char_lm
// measures the example byte-level Transformer language model instead (its own
// per-token loss) on the fortunes corpus (examples/text_to_tokens.py, TOKENS data),
// and prints both sides' validation loss per token after the same steps beside the
// corpus's unigram entropy. Ends with one JSON line.
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/bench_json.h"
#include "bench/common/bench_runfiles.h"
#include "bench/common/machine.h"
#include "bench/common/run_to_end.h"
#include "bench/common/training_run.h"
#include "bench/common/work_dir.h"
#include "common/child_process.h"
#include "common/malloc_thresholds.h"
#include "common/process.h"
#include "common/sha256.h"
#include "common/tls.h"
#include "worker/engine/torchscript.h"
#include "worker/engine/trainer.h"

ABSL_FLAG(std::string, model_file, "",
          "TorchScript file to train; empty = the example model --example_model, written by "
          "examples/models.py into the work dir. Default: empty.");
ABSL_FLAG(std::string, example_model, "cnn",
          "Without --model_file: which model of examples/models.py (mlp, cnn, cnn_small, or "
          "char_lm: a language model on token data). Default: cnn.");
ABSL_FLAG(bool, tokens, false,
          "Train on the fortunes token data (examples/text_to_tokens.py) with the model's own "
          "loss: implied by --example_model=char_lm. Default: false.");
ABSL_FLAG(int, seq_len, 64, "Token data: ids per window. Default: 64.");
ABSL_FLAG(int, eval_windows, 512,
          "Token data: test windows both sides evaluate the validation loss on. Default: 512.");
ABSL_FLAG(int, steps, 200, "Timed training steps on each side. Default: 200.");
ABSL_FLAG(int, warmup, 5, "Untimed steps first on each side. Default: 5.");
ABSL_FLAG(int, batch, 64, "Samples per step. Default: 64.");
ABSL_FLAG(int, threads, 1,
          "Threads on each side: LibTorch intra-op and OpenBLAS for Tributary's replica, "
          "torch.set_num_threads and OPENBLAS_NUM_THREADS for PyTorch. Default: 1.");
ABSL_FLAG(int, replicas, 1,
          "Tributary's in-process replicas the batch is split over (ReplicaGroup, as a "
          "worker's); --threads cores are shared among them (2 replicas, --threads=2: one "
          "core each). PyTorch's side stays one process with --threads. Default: 1.");
ABSL_FLAG(double, lr, 0.001, "Adam's learning rate on both sides. Default: 0.001.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "The Python with torch and numpy that runs the PyTorch side. Default: "
          "/usr/bin/python3.");
ABSL_FLAG(std::string, work_dir, "",
          "Directory for the model, the NPY data and the logs. Default: a new "
          "/tmp/tributary-torchscript_bench-XXXXXX.");

namespace tributary::bench {
namespace {

constexpr char kUsage[] =
    "torchscript_bench: Tributary's TorchScript replica vs PyTorch training the same file in\n"
    "one process (same data, batch, Adam, threads).\n"
    "Usage: bazel run //bench/torchscript:torchscript_bench -- [--model_file=net.pt] "
    "[--example_model=char_lm] [--steps=200] [--threads=1] [--replicas=1]";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "torchscript_bench: %s\n", status.ToString().c_str());
  return 1;
}

// Runs a helper to its end; an error with its last line when it fails.
absl::Status RunHelper(const std::string& name, const std::vector<std::string>& argv,
                       const std::string& log) {
  absl::StatusOr<int> exit_code = RunToEnd(name, argv, log);
  if (!exit_code.ok()) return exit_code.status();
  if (*exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(name, " exited with ", *exit_code, " (log ", log, "): ", LastLine(log)));
  }
  return absl::OkStatus();
}

int Run(const char* argv0) {
  const MachineInfo machine = DescribeMachine();
  if (!engine::BuiltWithTorch()) {
    return Fail(absl::UnavailableError(engine::TorchDescription()));
  }
  absl::StatusOr<std::string> dir = MakeWorkDir(absl::GetFlag(FLAGS_work_dir), "torchscript_bench");
  if (!dir.ok()) return Fail(dir.status());
  absl::StatusOr<BenchRunfiles> runfiles = BenchRunfiles::Create(argv0);
  if (!runfiles.ok()) return Fail(runfiles.status());
  const std::string python = absl::GetFlag(FLAGS_python);
  auto script = [&](const std::string& path) { return runfiles->Find("tributary/" + path); };
  absl::StatusOr<std::string> models = script("examples/models.py");
  absl::StatusOr<std::string> to_npy = script("examples/fashion_to_npy.py");
  absl::StatusOr<std::string> to_tokens = script("examples/text_to_tokens.py");
  absl::StatusOr<std::string> reference = script("bench/torchscript/pytorch_train.py");
  for (const auto* found : {&models, &to_npy, &to_tokens, &reference}) {
    if (!found->ok()) return Fail(found->status());
  }

  std::string model_path = absl::GetFlag(FLAGS_model_file);
  if (model_path.empty()) {
    if (absl::Status made = RunHelper(
            "models.py",
            {python, *models, "--model", absl::GetFlag(FLAGS_example_model), "--out", *dir},
            *dir + "/models.log");
        !made.ok()) {
      return Fail(made);
    }
    model_path = *dir + "/" + absl::GetFlag(FLAGS_example_model) + ".pt";
  }
  const bool tokens =
      absl::GetFlag(FLAGS_tokens) || absl::GetFlag(FLAGS_example_model) == "char_lm";
  const int seq_len = absl::GetFlag(FLAGS_seq_len);
  const int eval_windows = absl::GetFlag(FLAGS_eval_windows);
  if (absl::Status made =
          tokens ? RunHelper("text_to_tokens.py", {python, *to_tokens, "--out", *dir + "/data"},
                             *dir + "/text_to_tokens.log")
                 : RunHelper("fashion_to_npy.py", {python, *to_npy, "--out", *dir + "/data"},
                             *dir + "/fashion_to_npy.log");
      !made.ok()) {
    return Fail(made);
  }
  double unigram_entropy = 0;
  if (tokens) {
    const std::string corpus_path = *dir + "/data/corpus.json";
    absl::StatusOr<std::string> corpus_text = ReadFileToString(corpus_path);
    if (!corpus_text.ok()) return Fail(corpus_text.status());
    absl::StatusOr<google::protobuf::Struct> corpus = ParseJsonObject(*corpus_text, corpus_path);
    if (!corpus.ok()) return Fail(corpus.status());
    if (absl::Status read = JsonNumbers(
            *corpus, {JsonField{"unigram_entropy_nats", &unigram_entropy}}, corpus_path);
        !read.ok()) {
      return Fail(read);
    }
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  if (steps < 1 || warmup < 0 || batch < 1 || threads < 1) {
    return Fail(absl::InvalidArgumentError("--steps, --batch and --threads must be >= 1"));
  }
  if (replicas < 1 || replicas > threads || replicas > batch) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "--replicas=%d: must be from 1 to --threads (%d) and --batch (%d)", replicas, threads,
        batch)));
  }
  std::printf("torchscript_bench: %s\n", MachineLine(machine).c_str());
  std::printf("model %s, batch %d, Adam lr %g, %d threads (tributary: %d replicas), %d timed "
              "steps after %d\n",
              model_path.c_str(), batch, absl::GetFlag(FLAGS_lr), threads, replicas, steps,
              warmup);
  std::fflush(stdout);

  // Tributary: the single-process trainer with --replicas TorchScript replicas.
  absl::StatusOr<std::shared_ptr<const std::string>> bytes =
      engine::ReadModelFile(model_path, engine::kDefaultMaxModelBytes);
  if (!bytes.ok()) return Fail(bytes.status());
  v1::JobSpec spec;
  spec.mutable_model()->set_name("torchscript");
  spec.mutable_model()->mutable_torchscript()->set_sha256(Sha256Hex(**bytes));
  spec.mutable_model()->mutable_torchscript()->set_file_name(
      model_path.substr(model_path.find_last_of('/') + 1));
  v1::DatasetSpec& data = *spec.mutable_dataset();
  if (tokens) {
    data.set_format(v1::TOKENS);
    data.set_train_path(*dir + "/data/train_tokens.npy");
    data.set_test_path(*dir + "/data/test_tokens.npy");
    data.set_seq_len(static_cast<uint32_t>(seq_len));
    data.set_test_limit(static_cast<uint64_t>(eval_windows));
  } else {
    data.set_format(v1::NPY);
    data.set_train_path(*dir + "/data/train_x.npy");
    data.set_train_labels_path(*dir + "/data/train_y.npy");
  }
  spec.set_global_batch_size(static_cast<uint32_t>(batch));
  spec.set_max_steps(static_cast<uint64_t>(steps + warmup));
  spec.set_epochs(0);
  spec.mutable_optimizer()->set_type(v1::ADAM);
  spec.mutable_optimizer()->set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_lr)));
  // A constant rate, as torch.optim.Adam on the PyTorch side keeps it.
  spec.mutable_optimizer()->mutable_schedule()->set_kind(v1::CONSTANT);
  engine::TrainerOptions options;
  options.replicas = static_cast<uint32_t>(replicas);
  options.cpu_threads = threads;
  options.torchscript_bytes = *bytes;
  absl::StatusOr<std::unique_ptr<engine::LocalTrainer>> trainer =
      engine::LocalTrainer::Create(spec, options);
  if (!trainer.ok()) return Fail(trainer.status());
  for (int i = 0; i < warmup; ++i) {
    if (absl::StatusOr<engine::StepResult> s = (*trainer)->Step(); !s.ok()) return Fail(s.status());
  }
  int64_t samples = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<engine::StepResult> s = (*trainer)->Step();
    if (!s.ok()) return Fail(s.status());
    samples += s->stats.samples;
  }
  const double ours_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double ours = samples / ours_seconds;
  std::printf("tributary, %d TorchScript replica(s): %.0f samples/s (%.2f s)\n", replicas, ours,
              ours_seconds);
  std::fflush(stdout);
  double ours_test_loss = 0;
  if (tokens) {
    absl::StatusOr<engine::LossStats> evaluated = (*trainer)->Evaluate();
    if (!evaluated.ok()) return Fail(evaluated.status());
    ours_test_loss = evaluated->mean_loss();
  }

  // PyTorch: the same file, data, batch, optimizer and threads.
  const std::string log = *dir + "/pytorch_train.log";
  std::vector<std::string> pytorch = {python, *reference, "--model", model_path,
                                      "--batch", absl::StrCat(batch), "--steps",
                                      absl::StrCat(steps), "--warmup", absl::StrCat(warmup),
                                      "--threads", absl::StrCat(threads), "--lr",
                                      absl::StrCat(absl::GetFlag(FLAGS_lr))};
  if (tokens) {
    for (const std::string& arg :
         {std::string("--tokens"), *dir + "/data/train_tokens.npy", std::string("--test_tokens"),
          *dir + "/data/test_tokens.npy", std::string("--seq_len"), absl::StrCat(seq_len),
          std::string("--eval_windows"), absl::StrCat(eval_windows)}) {
      pytorch.push_back(arg);
    }
  } else {
    for (const std::string& arg : {std::string("--train_x"), *dir + "/data/train_x.npy",
                                   std::string("--train_y"), *dir + "/data/train_y.npy"}) {
      pytorch.push_back(arg);
    }
  }
  if (absl::Status ran = RunHelper("pytorch_train.py", pytorch, log); !ran.ok()) {
    return Fail(ran);
  }
  absl::StatusOr<std::string> text = ReadFileToString(log);
  if (!text.ok()) return Fail(text.status());
  absl::StatusOr<std::string> line = LastJsonLine(*text, log);
  if (!line.ok()) return Fail(line.status());
  absl::StatusOr<google::protobuf::Struct> json = ParseJsonObject(*line, log);
  if (!json.ok()) return Fail(json.status());
  double theirs = 0, theirs_seconds = 0;
  if (absl::Status read = JsonNumbers(
          *json, {JsonField{"samples_per_second", &theirs}, JsonField{"seconds", &theirs_seconds}},
          log);
      !read.ok()) {
    return Fail(read);
  }
  std::printf("PyTorch %s in one process:      %.0f samples/s (%.2f s)\n", "1.13", theirs,
              theirs_seconds);
  std::printf("ratio tributary / PyTorch: %.3f (goal >= %s)\n", ours / theirs,
              tokens ? "1.0" : "0.9");
  double theirs_test_loss = 0;
  if (tokens) {
    if (absl::Status read =
            JsonNumbers(*json, {JsonField{"test_loss", &theirs_test_loss}}, log);
        !read.ok()) {
      return Fail(read);
    }
    std::printf("validation loss per token after %d steps (%d windows of %d): tributary %.4f, "
                "PyTorch %.4f (ratio %.4f); the corpus's unigram entropy %.4f\n",
                steps + warmup, eval_windows, seq_len, ours_test_loss, theirs_test_loss,
                ours_test_loss / theirs_test_loss, unigram_entropy);
  }
  const MachineInfo after = DescribeMachine();
  std::printf("%s\n", LoadAverageAfterLine(after).c_str());
  absl::PrintF(
      "{\"bench\": \"torchscript\", %s, \"model\": %s, \"batch\": %d, \"threads\": %d, "
      "\"replicas\": %d, "
      "\"steps\": %d, \"tributary_samples_per_second\": %.1f, "
      "\"pytorch_samples_per_second\": %.1f, \"ratio\": %s, \"tributary_test_loss\": %.5f, "
      "\"pytorch_test_loss\": %.5f, \"unigram_entropy\": %.5f}\n",
      MachineJsonMembers(machine, after), JsonQuote(model_path), batch, threads, replicas, steps, ours,
      theirs, RatioJson(ours, theirs), ours_test_loss, theirs_test_loss, unigram_entropy);
  return 0;
}

}  // namespace
}  // namespace tributary::bench

int main(int argc, char** argv) {
  tributary::InitProcess(argc, argv, tributary::bench::kUsage);
  FLAGS_minloglevel = 1;
  // As the worker and train_local do (PyTorch's Python side needs no such setting).
  tributary::ReuseLargeBlocks();
  return tributary::bench::Run(argv[0]);
}
