#include "common/sha256.h"

#include <gtest/gtest.h>

namespace tributary {
namespace {

TEST(Sha256Test, KnownDigests) {
  // FIPS 180-2 examples.
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, IncrementalEqualsWhole) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 31));
  Sha256 hash;
  hash.Update(absl::string_view(data).substr(0, 12345));
  hash.Update(absl::string_view(data).substr(12345));
  EXPECT_EQ(hash.HexDigest(), Sha256Hex(data));
}

TEST(Sha256Test, RecognisesHexDigests) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex("abc"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'G')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));  // Lowercase only.
  EXPECT_FALSE(IsSha256Hex("../" + std::string(61, 'a')));
}

}  // namespace
}  // namespace tributary
