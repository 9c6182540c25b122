// The JSON a benchmark reads and writes: the summaries the benchmarked programs print
// (read as a protobuf Struct, so any JSON object parses), and the job spec every side
// of a comparison trains (written once, given to each program with --job_json).
#ifndef TRIBUTARY_BENCH_COMMON_BENCH_JSON_H_
#define TRIBUTARY_BENCH_COMMON_BENCH_JSON_H_

#include <google/protobuf/struct.pb.h>

#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace tributary::bench {

// INVALID_ARGUMENT naming `what` when `text` is not a JSON object.
absl::StatusOr<google::protobuf::Struct> ParseJsonObject(const std::string& text,
                                                         const std::string& what);

// The last line of `text` that starts with '{' (programs end with their JSON summary).
// NOT_FOUND naming `what` when there is none.
absl::StatusOr<std::string> LastJsonLine(const std::string& text, const std::string& what);

// The number at a dotted path ("job_spec.global_batch_size"); NOT_FOUND naming the
// path and `what` when a key is missing, INVALID_ARGUMENT when it is not a number.
absl::StatusOr<double> JsonNumber(const google::protobuf::Struct& object, const std::string& path,
                                  const std::string& what);
// A number to read: its dotted path and where it goes.
struct JsonField {
  const char* path;
  double* into;
};
// Reads every field's number (JsonNumber); the first error stops it.
absl::Status JsonNumbers(const google::protobuf::Struct& object,
                         std::initializer_list<JsonField> fields, const std::string& what);
// The same for a string.
absl::StatusOr<std::string> JsonString(const google::protobuf::Struct& object,
                                       const std::string& path, const std::string& what);

// Writes `spec` as proto3 JSON with the .proto field names (snake_case), which both
// `tributary --job_json` and `train_local --job_json` read, and so does the PyTorch
// side of vs_ddp. INTERNAL naming the path when it cannot be written.
absl::Status WriteJobJson(const v1::JobSpec& spec, const std::string& path);

// `spec` as one line of proto3 JSON with the .proto field names.
std::string JobSpecJson(const v1::JobSpec& spec);

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(const std::string& text);

}  // namespace tributary::bench

#endif  // TRIBUTARY_BENCH_COMMON_BENCH_JSON_H_
