// The bounds on a model's named metrics (docs/models.md "Metrics"): how many one
// evaluation may report and what a name may be. The worker's engine refuses a model
// whose `metrics(x, y)` breaks them, and the coordinator refuses a heartbeat that
// carries more, so both sides hold the same rule.
//
//   if (!IsMetricName(name)) return Invalid(MetricNameRule());
#ifndef TRIBUTARY_COMMON_MODEL_METRICS_H_
#define TRIBUTARY_COMMON_MODEL_METRICS_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace tributary {

inline constexpr size_t kMaxModelMetrics = 16;     // Named metrics per evaluation.
inline constexpr size_t kMaxMetricNameBytes = 64;  // The longest name.

// 1 to kMaxMetricNameBytes ASCII letters, digits or '_'.
bool IsMetricName(absl::string_view name);

// "names of 1-64 letters, digits or '_'": for errors.
std::string MetricNameRule();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_MODEL_METRICS_H_
