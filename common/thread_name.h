// Names the calling thread, so that `top -H`, `ps -L`, `perf` and gdb show what each of
// a process's threads is for ("train", "push", "lane-read", "shard-read", ...) instead
// of the binary's name. Linux keeps at most 15 bytes of a name: longer ones are cut.
#ifndef TRIBUTARY_COMMON_THREAD_NAME_H_
#define TRIBUTARY_COMMON_THREAD_NAME_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tributary {

// The longest name the kernel keeps (TASK_COMM_LEN - 1).
inline constexpr size_t kMaxThreadNameBytes = 15;

// Names the calling thread `name` (cut to kMaxThreadNameBytes). Best effort: a failure
// (none known on Linux) changes nothing else.
void NameThisThread(absl::string_view name);

// The calling thread's name, as the kernel keeps it ("" if it cannot be read).
std::string ThisThreadName();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_THREAD_NAME_H_
