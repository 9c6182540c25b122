#include "common/row_pieces.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace tributary {
namespace {

TEST(RowPiecesTest, PiecesHoldAtLeastTheMinimumAndAtMostTheCap) {
  // The default MLP: 784-256-128-10.
  EXPECT_EQ(RowPieceCount(256, 784), 8);   // 200,704 elements: capped at 8.
  EXPECT_EQ(RowPieceCount(128, 256), 2);   // 32,768 elements: two of 16,384.
  EXPECT_EQ(RowPieceCount(10, 128), 1);    // 1,280 elements.
  EXPECT_EQ(RowPieceCount(256, 1), 1);     // A bias.
  // Each piece of a count holds at least kMinPieceElements.
  for (int64_t rows : {1, 7, 64, 100, 4096}) {
    for (int64_t length : {1, 3, 100, 784, 20000}) {
      const int64_t pieces = RowPieceCount(rows, length);
      ASSERT_GE(pieces, 1);
      ASSERT_LE(pieces, kMaxPieces);
      ASSERT_LE(pieces, rows);
      if (pieces > 1) {
        EXPECT_GE(RowPiece(rows, pieces, pieces - 1).count * length, kMinPieceElements);
      }
    }
  }
}

TEST(RowPiecesTest, BadOrHugeShapesGiveOnePieceOrTheCapWithoutOverflow) {
  EXPECT_EQ(RowPieceCount(0, 784), 1);
  EXPECT_EQ(RowPieceCount(-5, 784), 1);
  EXPECT_EQ(RowPieceCount(256, 0), 1);
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(RowPieceCount(huge, huge), kMaxPieces);  // Each row is already a piece.
  EXPECT_EQ(RowPieceCount(huge, 1), kMaxPieces);
}

TEST(RowPiecesTest, PiecesCoverTheRowsInOrderWithoutGaps) {
  for (int64_t rows : {1, 8, 9, 255, 256, 257}) {
    for (int64_t pieces = 1; pieces <= std::min<int64_t>(rows, kMaxPieces); ++pieces) {
      int64_t next = 0;
      for (int64_t i = 0; i < pieces; ++i) {
        const RowRange range = RowPiece(rows, pieces, i);
        EXPECT_EQ(range.first, next) << rows << " rows, piece " << i << " of " << pieces;
        EXPECT_GE(range.count, rows / pieces);
        EXPECT_LE(range.count, rows / pieces + 1);
        next += range.count;
      }
      EXPECT_EQ(next, rows);
    }
  }
}

}  // namespace
}  // namespace tributary
