#include "worker/engine/replica_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/batch_split.h"

namespace tributary::engine {

ReplicaGroup::ReplicaGroup(std::vector<std::unique_ptr<Replica>> replicas)
    : replicas_(std::move(replicas)),
      scratch_(replicas_.size()),
      part_stats_(replicas_.size()),
      results_(replicas_.size()),
      lanes_(std::max(0, static_cast<int>(replicas_.size()) - 1), "replica") {}

ReplicaGroup::~ReplicaGroup() = default;

absl::Status ReplicaGroup::RunOnAll(const std::function<absl::Status(int)>& fn) {
  // Replica i always runs on the same thread (0: the caller's).
  lanes_.RunEach(size(), [&](int i) { results_[i] = fn(i); });
  for (const absl::Status& status : results_) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

Batch ReplicaGroup::GatherPart(int i, const Dataset& data, const uint64_t* samples, int64_t count) {
  const SampleRange part = PartsRange(count, size(), i, 1);
  data.Gather(samples + part.offset, static_cast<int64_t>(part.count), scratch_[i]);
  return scratch_[i].View();
}

absl::StatusOr<LossStats> ReplicaGroup::ComputeGradientSum(const Dataset& data,
                                                           const std::vector<uint64_t>& samples,
                                                           const DropoutKey& key, float* grad_sum) {
  if (data.feature_size() != model().input.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset ", data.source, ": ", data.feature_size(), " features per sample, model ",
        model().name, " expects ", model().input.size()));
  }
  const int64_t total = model().num_parameters;
  absl::Status status = RunOnAll([&](int i) -> absl::Status {
    Batch batch = GatherPart(i, data, samples.data(), static_cast<int64_t>(samples.size()));
    absl::StatusOr<LossStats> stats = replicas_[i]->ForwardBackward(batch, key, nullptr);
    if (!stats.ok()) return stats.status();
    part_stats_[i] = *stats;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  // Sum in replica order, each thread over its own slice of the buffer.
  status = RunOnAll([&](int i) -> absl::Status {
    const SampleRange range = PartsRange(total, size(), i, 1);
    const int64_t offset = static_cast<int64_t>(range.offset);
    const int64_t length = static_cast<int64_t>(range.count);
    for (int r = 0; r < size(); ++r) {
      const float* host = replicas_[r]->host_gradients();
      std::vector<float> copy;
      if (host == nullptr) {
        copy.resize(length);
        if (absl::Status s = replicas_[r]->CopyGradients(offset, length, copy.data()); !s.ok()) {
          return s;
        }
        host = copy.data() - offset;
      }
      float* dst = grad_sum + offset;
      if (r == 0) {
        std::copy(host + offset, host + offset + length, dst);
      } else {
        for (int64_t j = 0; j < length; ++j) dst[j] += host[offset + j];
      }
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  LossStats sum;
  for (const LossStats& part : part_stats_) sum += part;
  return sum;
}

absl::StatusOr<LossStats> ReplicaGroup::Evaluate(const Dataset& data, int64_t batch_size,
                                                 uint64_t max_samples) {
  if (data.feature_size() != model().input.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset ", data.source, ": ", data.feature_size(), " features per sample, model ",
        model().name, " expects ", model().input.size()));
  }
  std::vector<uint64_t> ids;
  LossStats total;
  const int64_t size = max_samples > 0 && max_samples < static_cast<uint64_t>(data.size())
                           ? static_cast<int64_t>(max_samples)
                           : data.size();
  for (int64_t start = 0; start < size; start += batch_size) {
    const int64_t count = std::min(batch_size, size - start);
    ids.resize(count);
    for (int64_t i = 0; i < count; ++i) ids[i] = static_cast<uint64_t>(start + i);
    absl::Status status = RunOnAll([&](int i) -> absl::Status {
      Batch batch = GatherPart(i, data, ids.data(), count);
      absl::StatusOr<LossStats> stats = replicas_[i]->Evaluate(batch);
      if (!stats.ok()) return stats.status();
      part_stats_[i] = *stats;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    for (const LossStats& part : part_stats_) total += part;
  }
  return total;
}

absl::Status ReplicaGroup::SetParameters(const float* host) {
  for (auto& replica : replicas_) {
    if (absl::Status s = replica->SetParameters(host, 0, model().num_parameters); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tributary::engine
