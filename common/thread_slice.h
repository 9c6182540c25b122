// The scheduler slice of the threads on a step's chain of hand-offs (a push, a shard's
// read and apply, a lane's read): each is woken, works for tens of microseconds and
// sleeps again, while the training threads keep the cores busy. Linux's EEVDF scheduler
// (6.6 and later) lets a running thread finish its slice (1.4 ms on a 2-core machine)
// before a woken thread of the same weight gets the core, so on a host whose cores the
// replicas fill every hand-off of a SYNC step waited 40-90 us for one (perf sched,
// docs/performance.md). A thread that asks for a shorter slice (sched_setattr's
// sched_runtime for SCHED_OTHER, honoured from Linux 6.12) preempts a running thread
// with a longer one as it wakes: the hand-off runs at once, the compute thread goes on
// after it. Earlier kernels accept the request and keep their default.
#ifndef TRIBUTARY_COMMON_THREAD_SLICE_H_
#define TRIBUTARY_COMMON_THREAD_SLICE_H_

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tributary {

// The kernel's bounds for a requested slice: it clamps anything else into them.
inline constexpr absl::Duration kMinThreadSlice = absl::Microseconds(100);
inline constexpr absl::Duration kMaxThreadSlice = absl::Milliseconds(100);

// Asks the kernel for time slices of `slice` for the calling thread, keeping its policy
// and nice value; absl::ZeroDuration() goes back to the kernel's default. Returns the
// slice the kernel keeps for the thread afterwards (sched_getattr): `slice` where the
// kernel honours per-thread slices, zero where it keeps none to report (before Linux
// 6.12). INVALID_ARGUMENT for a slice outside [kMinThreadSlice, kMaxThreadSlice] (zero
// aside); FAILED_PRECONDITION for a thread under a real-time or deadline policy (left
// alone); the system call's error otherwise.
absl::StatusOr<absl::Duration> RequestThreadSlice(absl::Duration slice);

// A thread's slice as the kernel keeps it (sched_getattr): the kernel's default or what
// the thread asked for; zero before Linux 6.12. `tid` 0: the calling thread.
absl::StatusOr<absl::Duration> ThreadSlice(pid_t tid = 0);

// The slice this process's hand-off threads ask for (NameHandoffThread): zero, the
// kernel's default, until SetHandoffSlice. Binaries set it once at start from their
// --handoff_slice_us flag. INVALID_ARGUMENT (and nothing changed) outside the bounds
// above, zero aside.
absl::Status SetHandoffSlice(absl::Duration slice);
absl::Duration HandoffSlice();

// Names the calling thread (NameThisThread) and, unless HandoffSlice() is zero, asks
// for that slice: for the threads on a step's critical path that wake, work briefly and
// sleep ("push", "lane-read", "shard-read", "shard-write", "ps-apply-<i>"), never for
// compute threads. The first such thread of the process logs what the kernel kept; a
// refusal is logged once and changes nothing else.
void NameHandoffThread(absl::string_view name);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_THREAD_SLICE_H_
