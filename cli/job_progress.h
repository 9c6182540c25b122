// How the command line shows a job: its progress line, the time it trained, its
// named metrics, the summary JSON of `tributary local --summary_json`, and messages as
// JSON.
#ifndef TRIBUTARY_CLI_JOB_PROGRESS_H_
#define TRIBUTARY_CLI_JOB_PROGRESS_H_

#include <cstdint>
#include <string>

#include <google/protobuf/map.h>
#include <google/protobuf/message.h>

#include "proto/coordinator.pb.h"

namespace tributary::cli {

// proto3 JSON with the proto's field names, indented.
std::string ToJson(const google::protobuf::Message& message);

// Seconds the job has trained: from its start to its end, or to now while it runs.
double TrainingSeconds(const v1::Job& job);

// "mm:ss" or "h:mm:ss"; "--:--" for a negative or infinite time.
std::string FormatDuration(double seconds);

// "<separator>name value" for each named metric, by name.
std::string MetricsText(const google::protobuf::Map<std::string, double>& metrics,
                        const std::string& separator);

// One line of progress from the coordinator's view of the job, `elapsed` seconds in.
std::string ProgressLine(const v1::Job& job, double elapsed);

// What `tributary local --summary_json` writes.
struct Summary {
  v1::Job job;
  double wall_seconds = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
};
std::string SummaryJson(const Summary& summary);

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_JOB_PROGRESS_H_
