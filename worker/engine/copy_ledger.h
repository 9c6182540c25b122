// The bookkeeping of a GPU replica's asynchronous host-to-device copies, without CUDA:
// which copy a reader of a range of the device buffer must wait for. Copies run in
// order on one copy stream and each is numbered (its sequence number names the CUDA
// event recorded after it), so a reader waits only for the latest copy that wrote any
// part of its range: every earlier copy finished before it. The ledger keeps disjoint
// intervals, each with the latest copy that wrote it; a copy over part of an interval
// splits it. Not thread-safe (the replica holds its copy mutex).
//
//   CopyLedger ledger;
//   ledger.Recorded(offset, length, seq);            // after enqueueing copy `seq`
//   if (auto seq = ledger.Latest(o, n)) WaitFor(*seq);  // before reading [o, o + n)
#ifndef TRIBUTARY_WORKER_ENGINE_COPY_LEDGER_H_
#define TRIBUTARY_WORKER_ENGINE_COPY_LEDGER_H_

#include <cstdint>
#include <map>
#include <optional>

namespace tributary::engine {

class CopyLedger {
 public:
  // Copy `seq` (increasing from call to call) wrote [offset, offset + length).
  void Recorded(int64_t offset, int64_t length, uint64_t seq);
  // The latest copy that wrote any element of [offset, offset + length), if any.
  std::optional<uint64_t> Latest(int64_t offset, int64_t length) const;
  // Intervals kept: at most the number of distinct ranges copied (partitions).
  size_t intervals() const { return intervals_.size(); }

 private:
  struct Interval {
    int64_t end;
    uint64_t seq;
  };
  std::map<int64_t, Interval> intervals_;  // By start.
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_COPY_LEDGER_H_
