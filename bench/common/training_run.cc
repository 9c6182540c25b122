#include "bench/common/training_run.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/common/bench_json.h"

namespace tributary::bench {
namespace {

// A row: its label, how each run's value prints, and its numeric value for the
// ratio (nullopt-like: negative means "no ratio").
struct Row {
  std::string label;
  std::function<std::string(const TrainingRun&)> text;
  std::function<double(const TrainingRun&)> value;  // Null: no ratio for this row.
};

std::string Seconds(double seconds) {
  return seconds < 0 ? std::string("not reached") : absl::StrFormat("%.1f", seconds);
}

}  // namespace

double TrainingRun::SecondsTo(double target) const {
  for (const Evaluation& evaluation : evaluations) {
    if (evaluation.accuracy >= target) return evaluation.seconds;
  }
  return -1;
}

std::string SideBySide(const std::vector<const TrainingRun*>& runs, double target) {
  std::vector<Row> rows = {
      {"test accuracy",
       [](const TrainingRun& r) { return absl::StrFormat("%.4f", r.test_accuracy); }, nullptr},
      {"final training loss",
       [](const TrainingRun& r) { return absl::StrFormat("%.4f", r.final_loss); }, nullptr},
      {"steps", [](const TrainingRun& r) { return absl::StrCat(r.steps); }, nullptr},
      {"samples/s (training wall)",
       [](const TrainingRun& r) { return absl::StrFormat("%.0f", r.SamplesPerSecond()); },
       [](const TrainingRun& r) { return r.SamplesPerSecond(); }},
      {"samples/s (as reported)",
       [](const TrainingRun& r) { return absl::StrFormat("%.0f", r.reported_samples_per_second); },
       [](const TrainingRun& r) { return r.reported_samples_per_second; }},
      {"training s (evals incl.)", [](const TrainingRun& r) { return Seconds(r.training_seconds); },
       [](const TrainingRun& r) { return r.training_seconds; }},
      {"setup s", [](const TrainingRun& r) { return Seconds(r.setup_seconds); }, nullptr},
      {"process s (launch to exit)",
       [](const TrainingRun& r) { return Seconds(r.process_seconds); },
       [](const TrainingRun& r) { return r.process_seconds; }},
  };
  if (target > 0) {
    rows.push_back({absl::StrFormat("s to accuracy %.3f", target),
                    [target](const TrainingRun& r) { return Seconds(r.SecondsTo(target)); },
                    [target](const TrainingRun& r) { return r.SecondsTo(target); }});
  }
  bool any_step_times = false;
  for (const TrainingRun* run : runs) any_step_times |= run->step_times.workers > 0;
  if (any_step_times) {
    const auto if_measured = [](std::function<std::string(const StepTimes&)> text) {
      return [text](const TrainingRun& r) {
        return r.step_times.workers > 0 ? text(r.step_times) : std::string("-");
      };
    };
    rows.push_back({"mean step s (workers)", if_measured([](const StepTimes& t) {
                      return absl::StrFormat("%.4f", t.MeanStepSeconds());
                    }),
                    nullptr});
    rows.push_back({"PS wait share of step", if_measured([](const StepTimes& t) {
                      return absl::StrFormat("%.1f%%", 100 * t.PushWaitShare());
                    }),
                    nullptr});
    rows.push_back({"reduce share of step", if_measured([](const StepTimes& t) {
                      return absl::StrFormat("%.1f%%", 100 * t.ReduceShare());
                    }),
                    nullptr});
    rows.push_back({"forward wait for parameters", if_measured([](const StepTimes& t) {
                      return absl::StrFormat("%.1f%%", 100 * t.ParametersWaitShare());
                    }),
                    nullptr});
    bool any_slowest = false;  // Only benchmarks that read the shards' /metrics know it.
    for (const TrainingRun* run : runs) any_slowest |= run->step_times.SlowestWaitShare() >= 0;
    if (any_slowest) {
      rows.push_back({"last push behind slowest", if_measured([](const StepTimes& t) {
                        return t.SlowestWaitShare() < 0
                                   ? std::string("-")
                                   : absl::StrFormat("%.1f%%", 100 * t.SlowestWaitShare());
                      }),
                      nullptr});
    }
  }

  static const char* const kOrdinals[] = {"1st", "2nd", "3rd", "4th", "5th", "6th"};
  const size_t n = runs.size();
  const bool ratios = n >= 2 && n <= 6;
  std::string table = absl::StrFormat("%-28s", "");
  for (const TrainingRun* run : runs) absl::StrAppend(&table, absl::StrFormat("%18s", run->name));
  if (ratios) {
    for (size_t i = 0; i + 1 < n; ++i) {
      absl::StrAppend(&table,
                      absl::StrFormat("%14s", absl::StrCat(kOrdinals[i], " / ", kOrdinals[n - 1])));
    }
  }
  absl::StrAppend(&table, "\n");
  for (const Row& row : rows) {
    absl::StrAppend(&table, absl::StrFormat("%-28s", row.label));
    for (const TrainingRun* run : runs) {
      absl::StrAppend(&table, absl::StrFormat("%18s", row.text(*run)));
    }
    if (ratios && row.value != nullptr) {
      const double last = row.value(*runs[n - 1]);
      for (size_t i = 0; i + 1 < n; ++i) {
        const double value = row.value(*runs[i]);
        absl::StrAppend(&table, value > 0 && last > 0 ? absl::StrFormat("%14.3f", value / last)
                                                      : absl::StrFormat("%14s", "-"));
      }
    }
    absl::StrAppend(&table, "\n");
  }
  return table;
}

std::string TrainingRunJson(const TrainingRun& run, double target) {
  std::vector<std::string> evaluations;
  for (const Evaluation& e : run.evaluations) {
    evaluations.push_back(absl::StrFormat("{\"step\": %d, \"accuracy\": %.4f, \"seconds\": %.2f}",
                                          e.step, e.accuracy, e.seconds));
  }
  std::string json = absl::StrFormat(
      "{\"name\": %s, \"test_accuracy\": %.4f, \"final_loss\": %.4f, \"steps\": %d, "
      "\"samples\": %d, \"samples_per_second\": %.1f, \"reported_samples_per_second\": %.1f, "
      "\"training_seconds\": %.2f, \"setup_seconds\": %.2f, \"process_seconds\": %.2f",
      JsonQuote(run.name), run.test_accuracy, run.final_loss, run.steps, run.samples,
      run.SamplesPerSecond(), run.reported_samples_per_second, run.training_seconds,
      run.setup_seconds, run.process_seconds);
  if (target > 0) {
    const double seconds = run.SecondsTo(target);
    absl::StrAppend(&json, ", \"seconds_to_target\": ",
                    seconds < 0 ? std::string("null") : absl::StrFormat("%.2f", seconds));
  }
  if (!run.partition_cut.empty()) {
    absl::StrAppend(&json, ", \"partition_cut\": ", JsonQuote(run.partition_cut));
  }
  if (run.step_times.workers > 0) {
    const StepTimes& t = run.step_times;
    absl::StrAppend(
        &json,
        absl::StrFormat(", \"step_times\": {\"workers\": %d, \"worker_steps\": %d, "
                        "\"mean_step_seconds\": %.5f, \"push_wait_share\": %.4f, "
                        "\"reduce_share\": %.4f, \"parameters_wait_share\": %.4f, "
                        "\"step_seconds_sum\": %.3f, \"push_wait_seconds_sum\": %.3f, "
                        "\"reduce_seconds_sum\": %.3f, \"parameters_wait_seconds_sum\": %.3f, "
                        "\"forward_share\": %.4f, \"backward_share\": %.4f, "
                        "\"copy_share\": %.4f, \"push_share\": %.4f, \"ps_apply_share\": %s, "
                        "\"slowest_wait_share\": %s}",
                        t.workers, t.steps, t.MeanStepSeconds(), t.PushWaitShare(), t.ReduceShare(),
                        t.ParametersWaitShare(), t.step_seconds, t.push_wait_seconds,
                        t.reduce_seconds, t.parameters_wait_seconds, t.Share(t.forward_seconds),
                        t.Share(t.backward_seconds), t.Share(t.copy_seconds),
                        t.Share(t.push_seconds),
                        t.PsApplyShare() < 0 ? std::string("null")
                                             : absl::StrFormat("%.4f", t.PsApplyShare()),
                        t.SlowestWaitShare() < 0
                            ? std::string("null")
                            : absl::StrFormat("%.4f", t.SlowestWaitShare())));
  }
  if (run.cpu.measured()) absl::StrAppend(&json, ", \"cpu\": ", CpuUseJson(run.cpu));
  if (run.bytes_pushed > 0 || run.bytes_pulled > 0) {
    absl::StrAppend(&json, absl::StrFormat(", \"bytes_pushed\": %d, \"bytes_pulled\": %d",
                                           run.bytes_pushed, run.bytes_pulled));
  }
  absl::StrAppend(&json, ", \"evaluations\": [", absl::StrJoin(evaluations, ", "), "]}");
  return json;
}

std::string AccuracyCurve(const TrainingRun& run) {
  std::vector<std::string> points;
  for (const Evaluation& e : run.evaluations) {
    points.push_back(absl::StrFormat("%.4f@%.1fs", e.accuracy, e.seconds));
  }
  return points.empty() ? std::string("none") : absl::StrJoin(points, "  ");
}

std::string RatioJson(double numerator, double denominator, int digits) {
  return numerator > 0 && denominator > 0 ? absl::StrFormat("%.*f", digits, numerator / denominator)
                                          : std::string("null");
}

}  // namespace tributary::bench
