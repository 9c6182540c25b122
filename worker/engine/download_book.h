// The bookkeeping of a GPU replica's gradient downloads started ahead of their use
// (Replica::PrefetchGradients), without CUDA: which slot (a pair of CUDA events on the
// copy stream) holds the download of a range for the current pass, so that
// StageGradients of that range waits for that download instead of starting its own
// and waiting for it. A download belongs to the pass that started it: a later pass
// never takes it (the range then holds older gradients), and its slot is reused. The
// copy stream runs in order, so a download started later finishes after every earlier
// one, taken or not. Not thread-safe (the replica holds its copy mutex).
//
//   DownloadBook book(64);
//   if (auto slot = book.Start(offset, length, pass)) Enqueue(*slot);  // PrefetchGradients
//   if (auto slot = book.Take(offset, length, pass)) WaitFor(*slot);   // StageGradients
#ifndef TRIBUTARY_WORKER_ENGINE_DOWNLOAD_BOOK_H_
#define TRIBUTARY_WORKER_ENGINE_DOWNLOAD_BOOK_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace tributary::engine {

class DownloadBook {
 public:
  // `slots` downloads at most outstanding in one pass (at least 1).
  explicit DownloadBook(int slots);

  // A slot for the download of [offset, offset + length) in `pass`: nullopt when that
  // exact range was started in this pass and not taken yet, when length <= 0, or when
  // every slot holds an untaken download of this pass (the caller then downloads the
  // range when it needs it). A slot of an earlier pass is reused.
  std::optional<int> Start(int64_t offset, int64_t length, uint64_t pass);

  // The slot of the untaken download of exactly [offset, offset + length) started in
  // `pass`, now free; nullopt when there is none (never started, of another pass, or
  // taken already).
  std::optional<int> Take(int64_t offset, int64_t length, uint64_t pass);

  // Untaken downloads of `pass`.
  int Pending(uint64_t pass) const;

 private:
  struct Slot {
    bool used = false;
    int64_t offset = 0;
    int64_t length = 0;
    uint64_t pass = 0;
  };
  std::vector<Slot> slots_;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_DOWNLOAD_BOOK_H_
