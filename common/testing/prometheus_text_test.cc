#include "common/testing/prometheus_text.h"

#include <gtest/gtest.h>

namespace tributary::testing {
namespace {

TEST(PrometheusTextTest, ParsesCountersAndHistograms) {
  const std::string text =
      "# HELP rpc_total RPCs.\n"
      "# TYPE rpc_total counter\n"
      "rpc_total{method=\"/a.B/C\",code=\"OK\"} 3\n"
      "rpc_total{method=\"/a.B/C\",code=\"NOT_FOUND\"} 2\n"
      "# TYPE latency histogram\n"
      "latency_bucket{le=\"0.1\"} 1\n"
      "latency_bucket{le=\"+Inf\"} 4\n"
      "latency_sum 0.5\n"
      "latency_count 4\n";
  absl::StatusOr<ParsedMetrics> parsed = ParsePrometheusText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Sum("rpc_total"), 5);
  EXPECT_EQ(parsed->Sum("rpc_total", "code=\"OK\""), 3);
  EXPECT_EQ(parsed->Sum("latency_count"), 4);
  EXPECT_EQ(parsed->types.at("latency"), "histogram");
}

TEST(PrometheusTextTest, RejectsMalformedLines) {
  EXPECT_FALSE(ParsePrometheusText("9bad 1\n").ok());
  EXPECT_FALSE(ParsePrometheusText("good{le=\"1} 1\n").ok());
  EXPECT_FALSE(ParsePrometheusText("good 1x\n").ok());
  EXPECT_FALSE(ParsePrometheusText("# TYPE good gauges\n").ok());
  EXPECT_FALSE(ParsePrometheusText("# TYPE a gauge\nb 1\n").ok());
  EXPECT_FALSE(ParsePrometheusText("novalue\n").ok());
}

}  // namespace
}  // namespace tributary::testing
