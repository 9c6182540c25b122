#include "common/model_metrics.h"

#include <string>

#include "gtest/gtest.h"

namespace tributary {
namespace {

TEST(ModelMetricsTest, NamesAreOneToSixtyFourLettersDigitsOrUnderscores) {
  EXPECT_TRUE(IsMetricName("token_accuracy"));
  EXPECT_TRUE(IsMetricName("a"));
  EXPECT_TRUE(IsMetricName("Top5_2"));
  EXPECT_TRUE(IsMetricName(std::string(kMaxMetricNameBytes, 'm')));
  EXPECT_FALSE(IsMetricName(std::string(kMaxMetricNameBytes + 1, 'm')));
  EXPECT_FALSE(IsMetricName(""));
  EXPECT_FALSE(IsMetricName("top-5"));
  EXPECT_FALSE(IsMetricName("a b"));
  EXPECT_FALSE(IsMetricName("acc{job=\"x\"}"));
  EXPECT_FALSE(IsMetricName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsMetricName("\xc3\xa9"));  // é: ASCII only
  EXPECT_EQ(MetricNameRule(), "names of 1-64 letters, digits or '_'");
}

}  // namespace
}  // namespace tributary
