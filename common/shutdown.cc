#include "common/shutdown.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <glog/logging.h>

#include <atomic>

#include "common/thread_name.h"

namespace tributary {
namespace {

// A signal delivered to a thread that does not block it: one that a library started
// before main() blocked the shutdown signals (OpenBLAS, under LibTorch, starts its
// threads when it is loaded). The handler only records it; the watcher acts.
std::atomic<int> pending_signal{0};

void RecordSignal(int signal_number) { pending_signal.store(signal_number); }

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

ShutdownSignal::ShutdownSignal() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // A peer that vanishes mid-write must give an error, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  watcher_ = std::thread([this] {
    NameThisThread("signals");
    WatchSignals();
  });
}

ShutdownSignal::~ShutdownSignal() {
  stop_watching_ = true;
  watcher_.join();
}

void ShutdownSignal::WatchSignals() {
  sigset_t set = ShutdownSignals();
  const timespec tick{0, 200 * 1000 * 1000};
  while (!stop_watching_) {
    int signal_number = sigtimedwait(&set, nullptr, &tick);
    if (signal_number < 0) signal_number = pending_signal.exchange(0);
    if (signal_number <= 0) continue;
    const std::string name = signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
    if (signalled_.exchange(true)) {
      // A second signal while draining: the operator wants out now. (A shutdown the
      // process began by itself, e.g. a worker whose job ended, is not a first one.)
      LOG(WARNING) << name << " again while shutting down: exiting immediately";
      _exit(128 + signal_number);
    }
    LOG(INFO) << name << " received: shutting down (send again to exit at once)";
    Request(name);
  }
}

void ShutdownSignal::Request(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (requested_) return;
  requested_ = true;
  reason_ = reason;
}

std::string ShutdownSignal::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&requested_));
  return reason_;
}

bool ShutdownSignal::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&requested_), timeout);
}

bool ShutdownSignal::requested() const {
  absl::MutexLock lock(&mu_);
  return requested_;
}

}  // namespace tributary
