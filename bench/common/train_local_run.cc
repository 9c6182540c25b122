#include "bench/common/train_local_run.h"

#include <cstdio>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/common/bench_json.h"
#include "common/child_process.h"
#include "common/tls.h"

namespace tributary::bench {

absl::StatusOr<TrainingRun> RunTrainLocal(const TrainLocalOptions& options) {
  TrainingRun run;
  run.name = options.name;
  run.log_path = options.log_path;
  std::remove(options.log_path.c_str());
  const std::vector<std::string> argv = {
      options.binary,
      "--job_json=" + options.job_json,
      absl::StrCat("--replicas=", options.replicas),
      absl::StrCat("--threads=", options.threads),
  };
  const absl::Time launch = absl::Now();
  absl::StatusOr<std::unique_ptr<ChildProcess>> started =
      ChildProcess::Start("train_local", argv, options.log_path);
  if (!started.ok()) return started.status();
  ChildProcess& child = **started;
  while (child.Running()) absl::SleepFor(absl::Milliseconds(20));
  run.process_seconds = absl::ToDoubleSeconds(absl::Now() - launch);
  if (child.exit_code() != 0) {
    return absl::UnavailableError(absl::StrCat("train_local ", child.ExitDescription(),
                                               "; last lines of ", options.log_path, ":\n",
                                               child.LogTail(30)));
  }

  absl::StatusOr<std::string> output = ReadFileToString(options.log_path);
  if (!output.ok()) return output.status();
  const std::string what = "train_local output " + options.log_path;
  // "... data loaded in 1.2s" and "eval   epoch 1/3 step 938: test loss 0.4583 accuracy
  // 0.8237 (10000 samples, 0.6s) elapsed 10.0s" (worker/train_local_main.cc).
  static const std::regex kLoaded(R"(data loaded in ([0-9.]+)s)");
  static const std::regex kEval(
      R"(^eval +epoch [\d/]+ step (\d+): test loss [-0-9.naif]+ accuracy ([0-9.]+) .* elapsed ([0-9.]+)s)");
  std::istringstream lines(*output);
  std::string line;
  bool loaded = false;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!loaded && std::regex_search(line, match, kLoaded)) {
      run.setup_seconds = std::stod(match[1]);
      loaded = true;
    } else if (std::regex_search(line, match, kEval)) {
      run.evaluations.push_back({std::stoull(match[1]), std::stod(match[2]), std::stod(match[3])});
    }
  }
  if (!loaded) return absl::NotFoundError(absl::StrCat(what, ": no 'data loaded in' line"));
  absl::StatusOr<std::string> json = LastJsonLine(*output, what);
  if (!json.ok()) return json.status();
  absl::StatusOr<google::protobuf::Struct> summary = ParseJsonObject(*json, what);
  if (!summary.ok()) return summary.status();
  double accuracy = 0, loss = 0, steps = 0, reported = 0, wall = 0, batch = 0;
  const absl::Status read =
      JsonNumbers(*summary,
                  {JsonField{"test_accuracy", &accuracy}, JsonField{"final_loss", &loss},
                   JsonField{"steps", &steps}, JsonField{"train_samples_per_second", &reported},
                   JsonField{"wall_seconds", &wall}, JsonField{"batch", &batch}},
                  what);
  if (!read.ok()) return read;
  run.test_accuracy = accuracy;
  run.final_loss = loss;
  run.steps = static_cast<uint64_t>(steps);
  run.samples = run.steps * static_cast<uint64_t>(batch);
  run.reported_samples_per_second = reported;
  run.training_seconds = wall;
  return run;
}

}  // namespace tributary::bench
