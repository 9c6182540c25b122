#include "common/thread_slice.h"

#include <glog/logging.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace tributary {
namespace {

// struct sched_attr of sched_setattr(2); glibc 2.36 declares neither.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

std::atomic<int64_t> handoff_slice_ns{0};
std::atomic<bool> logged{false};

absl::Status Errno(const char* call, pid_t tid) {
  return absl::ErrnoToStatus(errno, absl::StrCat(call, " of thread ", tid == 0 ? ::gettid() : tid));
}

absl::StatusOr<SchedAttr> ThreadAttr(pid_t tid) {
  SchedAttr attr;
  std::memset(&attr, 0, sizeof(attr));
  if (::syscall(SYS_sched_getattr, tid, &attr, sizeof(attr), 0) != 0) {
    return Errno("sched_getattr", tid);
  }
  return attr;
}

absl::Status CheckSlice(absl::Duration slice) {
  if (slice == absl::ZeroDuration() || (slice >= kMinThreadSlice && slice <= kMaxThreadSlice)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "thread slice: must be 0 (the kernel's default) or in [",
      absl::ToInt64Microseconds(kMinThreadSlice), ", ", absl::ToInt64Microseconds(kMaxThreadSlice),
      "] us, got ", absl::FormatDuration(slice)));
}

}  // namespace

absl::StatusOr<absl::Duration> RequestThreadSlice(absl::Duration slice) {
  if (absl::Status ok = CheckSlice(slice); !ok.ok()) return ok;
  absl::StatusOr<SchedAttr> attr = ThreadAttr(0);
  if (!attr.ok()) return attr.status();
  if (attr->sched_policy != SCHED_OTHER && attr->sched_policy != SCHED_BATCH &&
      attr->sched_policy != SCHED_IDLE) {
    return absl::FailedPreconditionError(
        absl::StrCat("thread slice: thread ", ::gettid(), " runs under scheduling policy ",
                     attr->sched_policy, " (real-time or deadline), left as it is"));
  }
  attr->size = sizeof(SchedAttr);
  attr->sched_flags = 0;
  attr->sched_runtime = static_cast<uint64_t>(absl::ToInt64Nanoseconds(slice));
  attr->sched_deadline = 0;
  attr->sched_period = 0;
  if (::syscall(SYS_sched_setattr, 0, &*attr, 0) != 0) return Errno("sched_setattr", 0);
  return ThreadSlice();
}

absl::StatusOr<absl::Duration> ThreadSlice(pid_t tid) {
  absl::StatusOr<SchedAttr> attr = ThreadAttr(tid);
  if (!attr.ok()) return attr.status();
  return absl::Nanoseconds(static_cast<int64_t>(attr->sched_runtime));
}

absl::Status SetHandoffSlice(absl::Duration slice) {
  if (absl::Status ok = CheckSlice(slice); !ok.ok()) return ok;
  handoff_slice_ns = absl::ToInt64Nanoseconds(slice);
  return absl::OkStatus();
}

absl::Duration HandoffSlice() { return absl::Nanoseconds(handoff_slice_ns.load()); }

void NameHandoffThread(absl::string_view name) {
  NameThisThread(name);
  const absl::Duration slice = HandoffSlice();
  if (slice == absl::ZeroDuration()) return;
  absl::StatusOr<absl::Duration> kept = RequestThreadSlice(slice);
  if (logged.exchange(true)) return;
  if (!kept.ok()) {
    LOG(WARNING) << "hand-off threads keep the kernel's scheduler slice: " << kept.status();
  } else if (*kept != slice) {
    LOG(INFO) << "hand-off threads asked for a " << absl::FormatDuration(slice)
              << " scheduler slice; this kernel keeps "
              << (*kept == absl::ZeroDuration() ? std::string("none per thread (Linux < 6.12)")
                                                : absl::FormatDuration(*kept))
              << ": they wait for the compute threads' slices";
  } else {
    LOG(INFO) << "hand-off threads (" << name << ", ...) run with a " << absl::FormatDuration(slice)
              << " scheduler slice";
  }
}

}  // namespace tributary
