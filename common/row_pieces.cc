#include "common/row_pieces.h"

#include <algorithm>

namespace tributary {

int64_t RowPieceCount(int64_t rows, int64_t row_length) {
  if (rows <= 0 || row_length <= 0) return 1;
  // Divides first: rows * row_length may not fit in 64 bits for a hostile shape.
  const int64_t rows_per_piece_min =
      kMinPieceElements / row_length + (kMinPieceElements % row_length != 0 ? 1 : 0);
  const int64_t pieces = rows / std::max<int64_t>(1, rows_per_piece_min);
  return std::clamp<int64_t>(pieces, 1, std::min(kMaxPieces, rows));
}

RowRange RowPiece(int64_t rows, int64_t pieces, int64_t index) {
  const int64_t base = rows / pieces;
  const int64_t longer = rows % pieces;
  RowRange range;
  range.first = index * base + std::min(index, longer);
  range.count = base + (index < longer ? 1 : 0);
  return range;
}

}  // namespace tributary
