// Small deterministic batches for the engine's tests.
#ifndef TRIBUTARY_WORKER_ENGINE_TEST_UTIL_H_
#define TRIBUTARY_WORKER_ENGINE_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "worker/engine/counter_rng.h"
#include "worker/engine/model.h"
#include "worker/engine/replica.h"

namespace tributary::engine::testing {

// Owns the arrays a Batch points into.
struct OwnedBatch {
  std::vector<float> features;
  std::vector<int32_t> labels;
  std::vector<uint64_t> ids;

  Batch View(int64_t first = 0, int64_t count = -1) const {
    if (count < 0) count = static_cast<int64_t>(labels.size()) - first;
    const int64_t width = labels.empty() ? 0 : features.size() / labels.size();
    Batch b;
    b.features = features.data() + first * width;
    b.labels = labels.data() + first;
    b.sample_ids = ids.data() + first;
    b.count = count;
    return b;
  }
};

// n samples with features uniform in [-1, 1], random labels, ids 1000 + 7 * i.
inline OwnedBatch RandomBatch(const ModelDef& model, int64_t n, uint64_t seed) {
  OwnedBatch batch;
  CounterRng rng(seed, 99);
  batch.features.resize(n * model.input.size());
  for (float& f : batch.features) f = static_cast<float>(2 * rng.NextDouble() - 1);
  for (int64_t i = 0; i < n; ++i) {
    batch.labels.push_back(static_cast<int32_t>(rng.NextBelow(model.num_classes)));
    batch.ids.push_back(1000 + 7 * static_cast<uint64_t>(i));
  }
  return batch;
}

}  // namespace tributary::engine::testing

#endif  // TRIBUTARY_WORKER_ENGINE_TEST_UTIL_H_
