// Test helper: a strict parser of the Prometheus text exposition format (0.0.4),
// so tests can check that /metrics parses and read values out of it.
#ifndef TRIBUTARY_COMMON_TESTING_PROMETHEUS_TEXT_H_
#define TRIBUTARY_COMMON_TESTING_PROMETHEUS_TEXT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tributary::testing {

struct ParsedMetrics {
  // "name{label=\"value\",...}" (labels as written) -> sample value.
  std::map<std::string, double> samples;
  // Metric family name -> TYPE (counter, gauge, histogram, summary, untyped).
  std::map<std::string, std::string> types;

  // Sum of all samples of a metric name whose label text contains `label_filter`.
  double Sum(const std::string& name, const std::string& label_filter = "") const;
};

// INVALID_ARGUMENT naming the line number and text of the first malformed line:
// bad metric or label names, unterminated label values, unparsable numbers,
// TYPE lines with unknown types, samples of a family before its TYPE mismatch.
absl::StatusOr<ParsedMetrics> ParsePrometheusText(const std::string& text);

}  // namespace tributary::testing

#endif  // TRIBUTARY_COMMON_TESTING_PROMETHEUS_TEXT_H_
