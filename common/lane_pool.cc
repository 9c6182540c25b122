#include "common/lane_pool.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/thread_name.h"
#include "common/thread_slice.h"

namespace tributary {

LanePool::LanePool(int lanes, absl::string_view name, Work work) {
  lanes_.reserve(std::max(0, lanes));
  for (int i = 0; i < lanes; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    Lane* lane = lanes_.back().get();
    lane->thread = std::thread([lane, work, thread_name = absl::StrCat(name, "-", i)] {
      if (work == Work::kHandoff) {
        NameHandoffThread(thread_name);
      } else {
        NameThisThread(thread_name);
      }
      Run(lane);
    });
  }
}

LanePool::~LanePool() {
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
  }
  for (auto& lane : lanes_) lane->thread.join();
}

void LanePool::Submit(uint64_t key, std::function<void()> task) {
  if (lanes_.empty()) {
    task();
    return;
  }
  Lane& lane = *lanes_[key % lanes_.size()];
  absl::MutexLock lock(&lane.mu);
  lane.tasks.push_back(std::move(task));
}

void LanePool::Run(Lane* lane) {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&lane->mu);
      lane->mu.Await(absl::Condition(
          +[](Lane* l) ABSL_NO_THREAD_SAFETY_ANALYSIS { return l->stopping || !l->tasks.empty(); },
          lane));
      if (lane->tasks.empty()) return;  // Stopping and drained.
      task = std::move(lane->tasks.front());
      lane->tasks.pop_front();
    }
    task();
  }
}

void LanePool::RunEach(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (lanes_.empty()) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  absl::BlockingCounter done(n - 1);
  for (int i = 1; i < n; ++i) {
    Submit(static_cast<uint64_t>(i - 1), [&fn, &done, i] {
      fn(i);
      done.DecrementCount();
    });
  }
  fn(0);
  done.Wait();
}

namespace {

// One RunShared call, shared with the lanes that may join it (they hold it after the
// caller returned, so it lives in a shared_ptr; `fn` is read only by participants).
struct SharedRun {
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  int active ABSL_GUARDED_BY(mu) = 0;
  std::atomic<int> next{0};
  int tasks = 0;
  const std::function<void(int)>* fn = nullptr;

  void Work() {
    for (int i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) (*fn)(i);
  }
};

}  // namespace

void LanePool::RunShared(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (lanes_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  auto run = std::make_shared<SharedRun>();
  run->tasks = n;
  run->fn = &fn;
  const int helpers = std::min(lanes(), n - 1);
  for (int lane = 0; lane < helpers; ++lane) {
    Submit(static_cast<uint64_t>(lane), [run] {
      {
        absl::MutexLock lock(&run->mu);
        if (run->closed) return;  // The caller finished without us.
        ++run->active;
      }
      run->Work();
      absl::MutexLock lock(&run->mu);
      --run->active;
    });
  }
  run->Work();
  absl::MutexLock lock(&run->mu);
  run->closed = true;  // Lanes that start now take no part; joined ones finish theirs.
  auto idle = [&run]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run->mu) { return run->active == 0; };
  run->mu.Await(absl::Condition(&idle));
}

}  // namespace tributary
