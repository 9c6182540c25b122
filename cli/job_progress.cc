#include "cli/job_progress.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/proto_time.h"

namespace tributary::cli {

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// Seconds the job has trained: from its start to its end, or to now while it runs.
double TrainingSeconds(const v1::Job& job) {
  if (!job.has_started()) return 0;
  const absl::Time started = FromProto(job.started());
  const absl::Time until = job.has_finished() ? FromProto(job.finished()) : absl::Now();
  return std::max(0.0, absl::ToDoubleSeconds(until - started));
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%02d:%02d", s / 60, s % 60);
}

// "<sep>name value" for each named metric, by name.
std::string MetricsText(const google::protobuf::Map<std::string, double>& metrics,
                        const std::string& separator) {
  std::map<std::string, double> sorted(metrics.begin(), metrics.end());
  std::string text;
  for (const auto& [name, value] : sorted) {
    absl::StrAppend(&text, separator, name, " ", absl::StrFormat("%.4f", value));
  }
  return text;
}

// One line of progress from the coordinator's view of the job.
std::string ProgressLine(const v1::Job& job, double elapsed) {
  float loss = NAN, accuracy = -1;
  double samples_per_second = 0;
  // A model with its own loss has no accuracy: its test loss and named metrics say
  // how it does.
  std::string evaluation;
  if (job.progress_size() > 0) {
    const v1::ProgressPoint& last = job.progress(job.progress_size() - 1);
    loss = last.loss();
    // A paused job moves no samples; its last figure would say it does.
    samples_per_second = job.state() == v1::PAUSED ? 0 : last.samples_per_second();
    for (int i = job.progress_size() - 1; i >= 0; --i) {
      const v1::ProgressPoint& point = job.progress(i);
      if (point.test_accuracy() >= 0 || point.metrics_size() > 0 || point.test_loss() != 0) {
        accuracy = point.test_accuracy();
        if (accuracy < 0) absl::StrAppend(&evaluation, absl::StrFormat("  test_loss %.4f", point.test_loss()));
        absl::StrAppend(&evaluation, MetricsText(point.metrics(), "  "));
        break;
      }
    }
  }
  const double steps_per_second = job.step() > 0 && elapsed > 0 ? job.step() / elapsed : 0;
  const double eta = steps_per_second > 0 && job.total_steps() >= job.step()
                         ? (job.total_steps() - job.step()) / steps_per_second
                         : -1;
  const uint32_t epochs = job.spec().epochs();
  // Counted from 1; the job's epoch is the one the next step belongs to, which is one
  // past the last once every step ran.
  uint32_t epoch = job.epoch() + 1;
  if (epochs > 0) epoch = std::min(epoch, epochs);
  // A job that cannot start yet says why.
  const std::string waiting =
      job.waiting_reason().empty() ? std::string() : absl::StrCat("  (", job.waiting_reason(), ")");
  return absl::StrFormat(
      "%-10s epoch %u%s  step %llu/%llu  loss %s  acc %s%s  %s samples/s  elapsed %s  ETA %s%s",
      v1::JobState_Name(job.state()), epoch,
      epochs > 0 ? absl::StrCat("/", epochs) : std::string(),
      static_cast<unsigned long long>(job.step()),
      static_cast<unsigned long long>(job.total_steps()),
      std::isnan(loss) ? std::string("-") : absl::StrFormat("%.4f", loss),
      accuracy < 0 ? std::string("-") : absl::StrFormat("%.4f", accuracy), evaluation,
      absl::StrFormat("%.0f", samples_per_second), FormatDuration(elapsed), FormatDuration(eta),
      waiting);
}

std::string SummaryJson(const Summary& summary) {
  const v1::Job& job = summary.job;
  const v1::JobResult& result = job.result();
  const double samples_per_second =
      result.samples_per_second() > 0
          ? result.samples_per_second()
          : (job.progress_size() > 0
                 ? job.progress(job.progress_size() - 1).samples_per_second()
                 : 0);
  float final_loss = result.final_loss();
  if (final_loss == 0 && job.progress_size() > 0) {
    final_loss = job.progress(job.progress_size() - 1).loss();
  }
  // The model's named metrics, by name ({} when it has none).
  std::map<std::string, double> metrics(result.metrics().begin(), result.metrics().end());
  std::string metrics_json = "{";
  for (const auto& [name, value] : metrics) {
    absl::StrAppend(&metrics_json, metrics_json.size() > 1 ? "," : "", "\"", name, "\":",
                    absl::StrFormat("%.6g", value));
  }
  metrics_json += "}";
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(job.spec(), &spec_json, options);
  return absl::StrFormat(
      "{\"job_id\":\"%s\",\"state\":\"%s\",\"test_accuracy\":%.6f,\"test_loss\":%.6f,"
      "\"final_loss\":%.6f,\"steps\":%llu,\"samples_per_second\":%.2f,\"wall_seconds\":%.3f,"
      "\"training_seconds\":%.3f,"
      "\"bytes_pushed\":%llu,\"bytes_pulled\":%llu,\"metrics\":%s,\"job_spec\":%s}",
      job.job_id(), v1::JobState_Name(job.state()), result.test_accuracy(), result.test_loss(),
      final_loss, static_cast<unsigned long long>(job.step()), samples_per_second,
      summary.wall_seconds, TrainingSeconds(job),
      static_cast<unsigned long long>(summary.bytes_pushed),
      static_cast<unsigned long long>(summary.bytes_pulled), metrics_json, spec_json);
}

}  // namespace tributary::cli
