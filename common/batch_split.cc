#include "common/batch_split.h"

#include <algorithm>

namespace tributary {

std::vector<uint64_t> SplitEvenly(uint64_t n, uint32_t parts) {
  std::vector<uint64_t> sizes(parts, parts == 0 ? 0 : n / parts);
  for (uint32_t i = 0; parts != 0 && i < n % parts; ++i) ++sizes[i];
  return sizes;
}

SampleRange PartsRange(uint64_t n, uint32_t parts, uint32_t first, uint32_t count) {
  if (parts == 0) return {};
  const uint64_t base = n / parts;
  const uint64_t extra = n % parts;
  // Offset of part i: i * base + min(i, extra).
  auto offset_of = [&](uint64_t i) { return i * base + std::min<uint64_t>(i, extra); };
  const uint64_t begin = std::min<uint64_t>(first, parts);
  const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(first) + count, parts);
  return SampleRange{offset_of(begin), offset_of(end) - offset_of(begin)};
}

}  // namespace tributary
