// What one node's push stream keeps about its pushes, shared by the two transports of
// PushPull (the gRPC reactor in parameter_server_service.cc and a data-plane
// connection in data_plane.cc): its free receive slots, the pushes the shard holds
// (PushResult::kHeld) until it calls Retry, and the partitions whose values have not
// come back yet. Not thread-safe: the stream calls it under its own mutex.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_BOOK_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_BOOK_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/parameter_server/parameter_shard.h"

namespace tributary::ps {

template <typename Slot>
class PushBook {
 public:
  // Before the shard takes a push of `step` (in ASYNC its values come from inside
  // ParameterShard::Push).
  void Started(uint32_t partition, uint64_t step) { awaiting_[partition] = step; }

  // The shard's answer to the push in `slot` (`ran`: it was given to the shard; a push
  // of an ending stream is not). The slot is free again unless the shard holds the
  // push. Returns the refusal that ends the stream, OK otherwise.
  absl::Status Settle(Slot* slot, uint32_t partition, bool ran,
                      const absl::StatusOr<PushResult>& result) {
    if (ran && !result.ok()) {
      awaiting_.erase(partition);
      free_.push_back(slot);
      return result.status();
    }
    if (ran && *result == PushResult::kHeld) {
      held_[partition] = slot;  // Its slot stays taken until Retry().
    } else {
      free_.push_back(slot);
    }
    return absl::OkStatus();
  }

  // Retry(partition): the held push to run again, or null (none held, or the stream
  // is ending: then its slot is free again).
  Slot* TakeHeld(uint32_t partition, bool ending) {
    auto held = held_.find(partition);
    if (held == held_.end()) return nullptr;
    Slot* slot = held->second;
    held_.erase(held);
    if (ending) {
      free_.push_back(slot);
      return nullptr;
    }
    return slot;
  }

  // Values of a partition were delivered: a push of an earlier step has its answer.
  void Delivered(uint32_t partition, uint64_t step) {
    auto awaited = awaiting_.find(partition);
    if (awaited != awaiting_.end() && step > awaited->second) awaiting_.erase(awaited);
  }

  // No push held and none without its values.
  bool Answered() const { return held_.empty() && awaiting_.empty(); }

  void Free(Slot* slot) { free_.push_back(slot); }
  bool HasFree() const { return !free_.empty(); }
  Slot* TakeFree() {
    Slot* slot = free_.back();
    free_.pop_back();
    return slot;
  }

 private:
  std::vector<Slot*> free_;
  absl::flat_hash_map<uint32_t, Slot*> held_;
  // Partition -> step pushed whose new values have not come yet.
  absl::flat_hash_map<uint32_t, uint64_t> awaiting_;
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_BOOK_H_
