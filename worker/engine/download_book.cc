#include "worker/engine/download_book.h"

#include <algorithm>

namespace tributary::engine {

DownloadBook::DownloadBook(int slots) : slots_(std::max(1, slots)) {}

std::optional<int> DownloadBook::Start(int64_t offset, int64_t length, uint64_t pass) {
  if (length <= 0) return std::nullopt;
  int free = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& slot = slots_[i];
    if (slot.used && slot.pass == pass) {
      if (slot.offset == offset && slot.length == length) return std::nullopt;
      continue;
    }
    // Free, or an untaken download of an earlier pass: nobody will wait for it.
    if (free < 0) free = i;
  }
  if (free < 0) return std::nullopt;
  slots_[free] = Slot{true, offset, length, pass};
  return free;
}

std::optional<int> DownloadBook::Take(int64_t offset, int64_t length, uint64_t pass) {
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    Slot& slot = slots_[i];
    if (slot.used && slot.pass == pass && slot.offset == offset && slot.length == length) {
      slot.used = false;
      return i;
    }
  }
  return std::nullopt;
}

int DownloadBook::Pending(uint64_t pass) const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [pass](const Slot& slot) {
    return slot.used && slot.pass == pass;
  }));
}

}  // namespace tributary::engine
