// "threads": sums this process's replica gradients with a ParallelSum of its own
// (the replicas' threads may still be running backward for earlier layers).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/intra_node_reducer.h"
#include "worker/comm/parallel_sum.h"

namespace tributary::worker {
namespace {

class ThreadReducer : public IntraNodeReducer {
 public:
  explicit ThreadReducer(engine::ReplicaGroup& replicas)
      : replicas_(replicas), sum_(std::max(1, std::min<int>(replicas.size(), 4))) {
    for (int i = 0; i < replicas_.size(); ++i) {
      if (replicas_.replica(i).host_gradients() == nullptr) has_device_replicas_ = true;
    }
  }

  absl::Status ReduceGradients(int64_t offset, int64_t length, float* out) override {
    const int count = replicas_.size();
    if (count == 1) return replicas_.replica(0).CopyGradients(offset, length, out);
    if (has_device_replicas_) return ReduceThroughHost(offset, length, out);
    sources_.clear();
    for (int r = 0; r < count; ++r)
      sources_.push_back(replicas_.replica(r).host_gradients() + offset);
    sum_.Sum(sources_, length, out);
    return absl::OkStatus();
  }

  absl::StatusOr<const float*> ReduceInPlace(int64_t offset, int64_t length) override {
    if (replicas_.size() != 1) return nullptr;
    absl::StatusOr<const float*> staged = replicas_.replica(0).StageGradients(offset, length);
    if (absl::IsUnimplemented(staged.status())) return nullptr;  // ReduceGradients copies.
    return staged;
  }

  absl::Status PrefetchInPlace(int64_t offset, int64_t length) override {
    if (replicas_.size() != 1) return absl::OkStatus();
    return replicas_.replica(0).PrefetchGradients(offset, length);
  }

  // On the calling thread, not through ReplicaGroup::RunOnAll: the worker applies an
  // update while the replicas' threads already run the next forward pass.
  absl::Status BroadcastParameters(float* params, int64_t offset, int64_t length) override {
    for (int r = 0; r < replicas_.size(); ++r) {
      if (absl::Status s = replicas_.replica(r).SetParameters(params, offset, length); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  std::string name() const override { return "threads"; }

 private:
  // GPU replicas: copy each replica's range to the host and add in replica order.
  absl::Status ReduceThroughHost(int64_t offset, int64_t length, float* out) {
    staging_.resize(length);
    if (absl::Status s = replicas_.replica(0).CopyGradients(offset, length, out); !s.ok()) {
      return s;
    }
    for (int r = 1; r < replicas_.size(); ++r) {
      if (absl::Status s = replicas_.replica(r).CopyGradients(offset, length, staging_.data());
          !s.ok()) {
        return s;
      }
      for (int64_t i = 0; i < length; ++i) out[i] += staging_[i];
    }
    return absl::OkStatus();
  }

  engine::ReplicaGroup& replicas_;
  ParallelSum sum_;
  std::vector<const float*> sources_;
  bool has_device_replicas_ = false;
  std::vector<float> staging_;
};

}  // namespace

std::unique_ptr<IntraNodeReducer> MakeThreadReducer(engine::ReplicaGroup& replicas) {
  return std::make_unique<ThreadReducer>(replicas);
}

}  // namespace tributary::worker
