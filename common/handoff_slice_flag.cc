#include "common/handoff_slice_flag.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/thread_slice.h"

ABSL_FLAG(int64_t, handoff_slice_us, 100,
          "Scheduler time slice, in microseconds, that this process's hand-off threads (the "
          "threads a step's chain of hand-offs wakes: a worker's push and lane-read, a "
          "shard's shard-read, shard-write and ps-apply) ask Linux for, so that a woken one "
          "preempts a compute thread at once instead of waiting up to that thread's slice "
          "(the kernel's default: 1.4 ms on a 2-core machine under Linux 6.18). Honoured from "
          "Linux 6.12 (EEVDF's per-thread slice), kept without effect before; the process "
          "logs what the kernel kept. 0 = the kernel's default; else in [100, 100000]. "
          "Default: 100.");

namespace tributary {

absl::Status ApplyHandoffSliceFlag() {
  const int64_t us = absl::GetFlag(FLAGS_handoff_slice_us);
  if (absl::Status set = SetHandoffSlice(absl::Microseconds(us)); !set.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--handoff_slice_us=", us, ": ", set.message()));
  }
  return absl::OkStatus();
}

}  // namespace tributary
