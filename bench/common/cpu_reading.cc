#include "bench/common/cpu_reading.h"

#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tributary::bench {
namespace {

constexpr absl::string_view kThreadPrefix = "tributary_thread_cpu_seconds_total{thread=\"";

// A label value as the text format writes it, unescaped (\\, \" and \n).
std::string Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      ++i;
      out.push_back(text[i] == 'n' ? '\n' : text[i]);
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

void AddProcess(const std::string& kind, const testing::ParsedMetrics& metrics,
                CpuSnapshot& snapshot) {
  ++snapshot.processes[kind];
  snapshot.process_seconds[kind] += metrics.Sum("process_cpu_seconds_total");
  if (kind == "worker") {
    snapshot.worker_steps +=
        static_cast<uint64_t>(metrics.Sum("tributary_worker_step_seconds_count"));
  }
  for (const auto& [sample, value] : metrics.samples) {
    absl::string_view name = sample;
    if (!absl::ConsumePrefix(&name, kThreadPrefix) || !absl::ConsumeSuffix(&name, "\"}")) {
      continue;
    }
    snapshot.thread_seconds[{kind, Unescape(name)}] += value;
  }
  snapshot.voluntary +=
      metrics.Sum("tributary_thread_context_switches_total", "kind=\"voluntary\"");
  snapshot.involuntary +=
      metrics.Sum("tributary_thread_context_switches_total", "kind=\"involuntary\"");
}

}  // namespace tributary::bench
