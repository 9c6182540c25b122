#include "worker/comm/parallel_sum.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/batch_split.h"
#include "common/thread_name.h"

namespace tributary::worker {

ParallelSum::ParallelSum(int threads) : parts_(std::max(1, threads)) {
  for (int i = 1; i < parts_; ++i) threads_.emplace_back([this, i] {
      NameThisThread(absl::StrCat("reduce-", i));
      Loop(i);
    });
}

ParallelSum::~ParallelSum() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ParallelSum::SumSlice(int part) {
  const SampleRange slice = PartsRange(length_, parts_, part, 1);
  float* dst = out_ + slice.offset;
  const float* first = (*sources_)[0] + slice.offset;
  std::copy(first, first + slice.count, dst);
  for (size_t s = 1; s < sources_->size(); ++s) {
    const float* src = (*sources_)[s] + slice.offset;
    for (uint64_t i = 0; i < slice.count; ++i) dst[i] += src[i];
  }
}

void ParallelSum::Sum(const std::vector<const float*>& sources, int64_t length, float* out) {
  if (sources.empty() || length <= 0) return;
  // Small ranges are not worth waking the threads for.
  if (parts_ == 1 || length < 16384) {
    sources_ = &sources;
    length_ = length;
    out_ = out;
    const int parts = parts_;
    for (int part = 0; part < parts; ++part) SumSlice(part);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    sources_ = &sources;
    length_ = length;
    out_ = out;
    pending_ = parts_ - 1;
    ++generation_;
  }
  SumSlice(0);
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&done));
}

void ParallelSum::Loop(int index) {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = generation_;
    }
    SumSlice(index);
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

}  // namespace tributary::worker
