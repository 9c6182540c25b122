#include "common/model_metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tributary {

bool IsMetricName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxMetricNameBytes) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

std::string MetricNameRule() {
  return absl::StrCat("names of 1-", kMaxMetricNameBytes, " letters, digits or '_'");
}

}  // namespace tributary
