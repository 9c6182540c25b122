// --handoff_slice_us, the flag of the binaries that run hand-off threads (worker,
// parameter_server; common/thread_slice.h), declared once so the two cannot drift apart.
#ifndef TRIBUTARY_COMMON_HANDOFF_SLICE_FLAG_H_
#define TRIBUTARY_COMMON_HANDOFF_SLICE_FLAG_H_

#include <cstdint>

#include "absl/flags/declare.h"
#include "absl/status/status.h"

ABSL_DECLARE_FLAG(int64_t, handoff_slice_us);

namespace tributary {

// SetHandoffSlice from the flag, before the process starts any hand-off thread;
// INVALID_ARGUMENT naming the flag and its value when it is out of bounds.
absl::Status ApplyHandoffSliceFlag();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_HANDOFF_SLICE_FLAG_H_
