// Turns SIGTERM/SIGINT (and in-process requests such as a Drain RPC) into one
// event main() can wait for. Construct it first thing in main(), before any other
// thread exists, so that every thread inherits the blocked signal mask.
#ifndef TRIBUTARY_COMMON_SHUTDOWN_H_
#define TRIBUTARY_COMMON_SHUTDOWN_H_

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tributary {

class ShutdownSignal {
 public:
  ShutdownSignal();
  ~ShutdownSignal();

  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Asks for shutdown; the first reason wins. Safe from any thread.
  void Request(const std::string& reason);

  // Blocks until Request() or a signal; returns the reason ("SIGTERM", ...).
  std::string Wait();

  // Like Wait() but gives up after timeout; returns true when shutdown was requested.
  bool WaitFor(absl::Duration timeout);

  bool requested() const;

 private:
  void WatchSignals();

  mutable absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_watching_{false};
  std::atomic<bool> signalled_{false};  // A SIGTERM/SIGINT arrived (a second one exits).
  std::thread watcher_;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SHUTDOWN_H_
