#include "worker/engine/copy_ledger.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace tributary::engine {
namespace {

TEST(CopyLedgerTest, AReaderWaitsForTheLatestCopyOverItsRange) {
  CopyLedger ledger;
  EXPECT_EQ(ledger.Latest(0, 100), std::nullopt) << "nothing copied yet: nothing to wait for";
  ledger.Recorded(0, 40, 1);    // Partition 0.
  ledger.Recorded(40, 40, 2);   // Partition 1.
  ledger.Recorded(80, 20, 3);   // Partition 2.
  EXPECT_EQ(ledger.Latest(0, 10), 1u);
  EXPECT_EQ(ledger.Latest(30, 20), 2u) << "[30, 50) spans partitions 0 and 1";
  EXPECT_EQ(ledger.Latest(0, 100), 3u);
  EXPECT_EQ(ledger.Latest(100, 5), std::nullopt);
  EXPECT_EQ(ledger.Latest(10, 0), std::nullopt);
  // The next step's update of partition 0 comes back last.
  ledger.Recorded(80, 20, 4);
  ledger.Recorded(40, 40, 5);
  ledger.Recorded(0, 40, 6);
  EXPECT_EQ(ledger.Latest(85, 5), 4u);
  EXPECT_EQ(ledger.Latest(0, 40), 6u);
  EXPECT_EQ(ledger.intervals(), 3u) << "the same partitions every step keep the ledger small";
}

TEST(CopyLedgerTest, ACopyOverPartOfAnIntervalSplitsIt) {
  CopyLedger ledger;
  ledger.Recorded(0, 100, 1);
  ledger.Recorded(30, 20, 2);  // Inside: [0, 30) and [50, 100) stay copy 1.
  EXPECT_EQ(ledger.Latest(0, 30), 1u);
  EXPECT_EQ(ledger.Latest(50, 50), 1u);
  EXPECT_EQ(ledger.Latest(29, 2), 2u);
  EXPECT_EQ(ledger.intervals(), 3u);
  ledger.Recorded(20, 70, 3);  // Over the tail of [0, 30), all of [30, 50), the head of [50, 100).
  EXPECT_EQ(ledger.Latest(0, 20), 1u);
  EXPECT_EQ(ledger.Latest(90, 10), 1u);
  EXPECT_EQ(ledger.Latest(25, 1), 3u);
  EXPECT_EQ(ledger.Latest(89, 1), 3u);
  EXPECT_EQ(ledger.intervals(), 3u);
}

TEST(CopyLedgerTest, AgreesWithAnElementByElementRecord) {
  constexpr int64_t kLength = 300;
  std::mt19937_64 rng(7);
  CopyLedger ledger;
  std::vector<std::optional<uint64_t>> by_element(kLength);
  for (uint64_t seq = 1; seq <= 2000; ++seq) {
    const int64_t offset = static_cast<int64_t>(rng() % kLength);
    const int64_t length = 1 + static_cast<int64_t>(rng() % (kLength - offset));
    ledger.Recorded(offset, length, seq);
    for (int64_t i = offset; i < offset + length; ++i) by_element[i] = seq;
    const int64_t read = static_cast<int64_t>(rng() % kLength);
    const int64_t read_length = 1 + static_cast<int64_t>(rng() % (kLength - read));
    std::optional<uint64_t> expected;
    for (int64_t i = read; i < read + read_length; ++i) {
      if (by_element[i]) expected = std::max(expected.value_or(0), *by_element[i]);
    }
    ASSERT_EQ(ledger.Latest(read, read_length), expected) << "after copy " << seq;
  }
}

}  // namespace
}  // namespace tributary::engine
