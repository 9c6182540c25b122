// How a large 2-D tensor (a linear layer's weight, [rows, row_length] row-major) is
// cut into row pieces: the native engine computes such a weight's forward product and
// gradient piece by piece, and the partition plan (partition_plan.h) puts a partition
// boundary at every piece boundary, so that a piece's gradient can be pushed while the
// next piece is computed and the next step's forward can start on a piece whose update
// came back while the later ones are still on their way. A pure function of the shape:
// the single-process trainer computes in the same pieces, so it does the same
// arithmetic as the cluster.
#ifndef TRIBUTARY_COMMON_ROW_PIECES_H_
#define TRIBUTARY_COMMON_ROW_PIECES_H_

#include <cstdint>

namespace tributary {

// A piece holds at least this many elements (64 KiB of float32): smaller pieces cost
// more in messages and in re-read operands than their overlap gains.
inline constexpr int64_t kMinPieceElements = 16384;
// At most this many pieces per tensor.
inline constexpr int64_t kMaxPieces = 8;

// The number of row pieces of a [rows, row_length] tensor: the most pieces of at
// least kMinPieceElements each, at most kMaxPieces and at most `rows`; 1 for anything
// smaller than two pieces, or for rows <= 0 or row_length <= 0.
int64_t RowPieceCount(int64_t rows, int64_t row_length);

// Rows [first, first + count) of piece `index` of `pieces` (nearly equal, the first
// rows % pieces pieces one row longer). index in [0, pieces), pieces in [1, rows].
struct RowRange {
  int64_t first = 0;
  int64_t count = 0;
};
RowRange RowPiece(int64_t rows, int64_t pieces, int64_t index);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_ROW_PIECES_H_
