#include "worker/engine/copy_ledger.h"

#include <algorithm>

namespace tributary::engine {

void CopyLedger::Recorded(int64_t offset, int64_t length, uint64_t seq) {
  if (length <= 0) return;
  const int64_t end = offset + length;
  // The interval starting before `offset` that reaches into the range keeps its head.
  auto it = intervals_.lower_bound(offset);
  if (it != intervals_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > offset) {
      const Interval tail = before->second;
      before->second.end = offset;
      if (tail.end > end) intervals_[end] = tail;  // The range lies inside it: keep its tail.
    }
  }
  // Intervals starting inside the range: dropped, or cut to the part after it.
  it = intervals_.lower_bound(offset);
  while (it != intervals_.end() && it->first < end) {
    const Interval covered = it->second;
    it = intervals_.erase(it);
    if (covered.end > end) intervals_[end] = covered;
  }
  intervals_[offset] = Interval{end, seq};
}

std::optional<uint64_t> CopyLedger::Latest(int64_t offset, int64_t length) const {
  if (length <= 0) return std::nullopt;
  const int64_t end = offset + length;
  std::optional<uint64_t> latest;
  auto it = intervals_.upper_bound(offset);
  if (it != intervals_.begin()) --it;  // The interval that may contain `offset`.
  for (; it != intervals_.end() && it->first < end; ++it) {
    if (it->second.end <= offset) continue;
    latest = std::max(latest.value_or(0), it->second.seq);
  }
  return latest;
}

}  // namespace tributary::engine
