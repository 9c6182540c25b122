#include "worker/engine/download_book.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>

namespace tributary::engine {
namespace {

TEST(DownloadBookTest, AStageTakesTheDownloadItsPassStartedForItsRangeOnce) {
  DownloadBook book(4);
  // Pass 1 starts three partitions' downloads, last partition first.
  const std::optional<int> a = book.Start(80, 20, 1);
  const std::optional<int> b = book.Start(40, 40, 1);
  const std::optional<int> c = book.Start(0, 40, 1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(std::set<int>({*a, *b, *c}).size(), 3u) << "one slot each";
  EXPECT_EQ(book.Start(40, 40, 1), std::nullopt) << "already started in this pass";
  EXPECT_EQ(book.Pending(1), 3);
  EXPECT_EQ(book.Take(40, 40, 1), b);
  EXPECT_EQ(book.Take(40, 40, 1), std::nullopt) << "taken: the next stage downloads anew";
  EXPECT_EQ(book.Take(40, 20, 1), std::nullopt) << "only the exact range";
  EXPECT_EQ(book.Take(0, 40, 2), std::nullopt) << "another pass's gradients";
  EXPECT_EQ(book.Take(80, 20, 1), a);
  EXPECT_EQ(book.Take(0, 40, 1), c);
  EXPECT_EQ(book.Pending(1), 0);
  EXPECT_EQ(book.Start(10, 0, 1), std::nullopt) << "nothing to download";
}

TEST(DownloadBookTest, AnUntakenDownloadIsNeverTakenByALaterPassAndItsSlotIsReused) {
  DownloadBook book(2);
  ASSERT_TRUE(book.Start(0, 10, 7).has_value());
  ASSERT_TRUE(book.Start(10, 10, 7).has_value());
  // Pass 7's step was abandoned before its pushes: its downloads are never taken.
  EXPECT_EQ(book.Pending(8), 0);
  const std::optional<int> again = book.Start(0, 10, 8);
  ASSERT_TRUE(again.has_value()) << "a slot of an earlier pass is free for reuse";
  EXPECT_EQ(book.Take(10, 10, 8), std::nullopt) << "pass 7's download of this range";
  EXPECT_EQ(book.Take(0, 10, 8), again);
}

TEST(DownloadBookTest, WhenEverySlotHoldsThisPassesDownloadsTheRestAreNotStarted) {
  DownloadBook book(2);
  ASSERT_TRUE(book.Start(0, 10, 1).has_value());
  ASSERT_TRUE(book.Start(10, 10, 1).has_value());
  EXPECT_EQ(book.Start(20, 10, 1), std::nullopt) << "StageGradients downloads it itself";
  ASSERT_TRUE(book.Take(0, 10, 1).has_value());
  EXPECT_TRUE(book.Start(20, 10, 1).has_value()) << "a taken slot is free again";
  EXPECT_EQ(DownloadBook(0).Start(0, 1, 1), 0) << "at least one slot";
}

}  // namespace
}  // namespace tributary::engine
