#include "common/wire_dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace tributary {
namespace {

TEST(WireDtypeTest, HalfRoundTripsEveryFiniteValue) {
  // Every binary16 bit pattern widens to the float that narrows back to it.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x03ff) != 0) {
      EXPECT_TRUE(std::isnan(value)) << bits;
      continue;
    }
    EXPECT_EQ(FloatToHalf(value), half) << bits << " -> " << value;
  }
}

TEST(WireDtypeTest, HalfKnownValuesAndRounding) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // Smallest subnormal.
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // Halfway to 65536 rounds to even: Inf.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // Tie -> even mantissa.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(WireDtypeTest, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(Bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
}

TEST(WireDtypeTest, AccumulateWidensEachDtypeFromUnalignedBytes) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 1024.0f, -0.0078125f};
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) {
    const size_t width = WireBytes(dtype);
    std::string wire(1 + values.size() * width, '\0');
    NarrowInto(dtype, values.data(), values.size(), wire.data() + 1);  // Deliberately odd.
    std::vector<float> sum(values.size(), 1.0f);
    AccumulateInto(dtype, wire.data() + 1, values.size(), sum.data());
    AccumulateInto(dtype, wire.data() + 1, values.size(), sum.data());
    std::vector<float> widened(values.size());
    WidenInto(dtype, wire.data() + 1, values.size(), widened.data());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(sum[i], 1.0f + 2 * values[i]) << v1::DType_Name(dtype) << " " << i;
      EXPECT_EQ(widened[i], values[i]) << v1::DType_Name(dtype) << " " << i;
    }
  }
  EXPECT_EQ(WireBytes(v1::DTYPE_UNSPECIFIED), 0u);
}

}  // namespace
}  // namespace tributary
