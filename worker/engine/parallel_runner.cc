#include "worker/engine/parallel_runner.h"

#include <algorithm>

namespace tributary::engine {

ParallelRunner::ParallelRunner(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

ParallelRunner::~ParallelRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  for (std::thread& helper : helpers_) helper.join();
}

void ParallelRunner::Work() {
  for (int i = next_.fetch_add(1); i < tasks_; i = next_.fetch_add(1)) (*fn_)(i);
}

void ParallelRunner::HelperLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && (generation_ == seen || !open_)) {
        if (generation_ != seen) seen = generation_;  // A job closed before we woke.
        wake_.Wait(&mu_);
      }
      if (stopping_) return;
      seen = generation_;
      ++active_;
    }
    Work();
    absl::MutexLock lock(&mu_);
    if (--active_ == 0) idle_.SignalAll();
  }
}

void ParallelRunner::Run(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  if (helpers_.empty() || tasks == 1) {
    for (int i = 0; i < tasks; ++i) fn(i);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    tasks_ = tasks;
    next_ = 0;
    open_ = true;
    ++generation_;
    wake_.SignalAll();
  }
  Work();
  absl::MutexLock lock(&mu_);
  open_ = false;  // Late helpers go back to sleep; joined ones finish their blocks.
  while (active_ > 0) idle_.Wait(&mu_);
}

}  // namespace tributary::engine
