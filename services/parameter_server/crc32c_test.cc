#include "services/parameter_server/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace tributary::ps {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // The check value of CRC-32C (RFC 3720 appendix B.4 and the CRC catalogue).
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32cHex(0xe3069283u), "e3069283");
}

TEST(Crc32cTest, HardwareAndPortableAgreeAndExtendComposes) {
  std::mt19937 random(7);
  std::string data(10007, '\0');
  for (char& c : data) c = static_cast<char>(random());
  for (size_t size : {0, 1, 7, 8, 9, 63, 64, 1000, 10007}) {
    EXPECT_EQ(Crc32c(data.data(), size), Crc32cExtendPortable(0, data.data(), size)) << size;
  }
  const uint32_t whole = Crc32c(data.data(), data.size());
  const uint32_t split =
      Crc32cExtend(Crc32c(data.data(), 333), data.data() + 333, data.size() - 333);
  EXPECT_EQ(whole, split);
  data[5000] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace tributary::ps
