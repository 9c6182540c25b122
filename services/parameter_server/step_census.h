// How many of a shard's partitions stand at each step, to know the shard's step (the
// lowest) as partitions complete steps independently. Partitions spread over a few
// steps at most (SYNC: two), so a small sorted vector with reserved room does it
// without allocating on the push path, where a std::map would allocate per new step.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_STEP_CENSUS_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_STEP_CENSUS_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tributary::ps {

class StepCensus {
 public:
  StepCensus() { counts_.reserve(kReserved); }

  void Clear() { counts_.clear(); }
  // One more partition at `step`.
  void Add(uint64_t step) {
    auto it = Find(step);
    if (it != counts_.end() && it->first == step) {
      ++it->second;
    } else {
      counts_.insert(it, {step, 1});
    }
  }
  // One partition moved from `from` to `to` (`from` not counted: only adds `to`).
  void Move(uint64_t from, uint64_t to) {
    auto it = Find(from);
    if (it != counts_.end() && it->first == from && --it->second == 0) counts_.erase(it);
    Add(to);
  }
  bool empty() const { return counts_.empty(); }
  // The lowest step any partition stands at; 0 when there are none.
  uint64_t lowest() const { return counts_.empty() ? 0 : counts_.front().first; }
  // Partitions counted at `step`.
  uint32_t at(uint64_t step) const {
    auto it = std::lower_bound(counts_.begin(), counts_.end(), step,
                               [](const auto& entry, uint64_t s) { return entry.first < s; });
    return it != counts_.end() && it->first == step ? it->second : 0;
  }

 private:
  static constexpr size_t kReserved = 64;
  std::vector<std::pair<uint64_t, uint32_t>>::iterator Find(uint64_t step) {
    return std::lower_bound(counts_.begin(), counts_.end(), step,
                            [](const auto& entry, uint64_t s) { return entry.first < s; });
  }
  std::vector<std::pair<uint64_t, uint32_t>> counts_;  // (step, partitions), by step.
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_STEP_CENSUS_H_
