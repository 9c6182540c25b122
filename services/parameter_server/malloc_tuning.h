// glibc malloc settings for a process that moves multi-megabyte messages. By default
// each gRPC thread gets its own malloc arena; those arenas grow and shrink their
// heaps with every 4 MiB buffer (mprotect + page faults), and large blocks are
// mmapped and unmapped. ps_bench measured the PS push/pull path about 2.5x faster with
// one arena, a 32 MiB mmap threshold and a 1 GiB trim threshold: buffers are reused
// instead of faulted in again.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_MALLOC_TUNING_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_MALLOC_TUNING_H_

namespace tributary::ps {

// The GLIBC_TUNABLES value the process wants for `arena_max` (> 0).
const char* MallocTunables(int arena_max);

// Applies the settings. glibc reads the arena limit reliably only from the
// environment at start-up (mallopt(M_ARENA_MAX) did not stop gRPC's threads from
// creating arenas), so when GLIBC_TUNABLES does not already set it, this sets it and
// re-executes the program (/proc/self/exe, same argv and pid); call it first in
// main(), before any thread exists. Returns normally when no re-exec was needed or
// possible (then the thresholds are set with mallopt); arena_max <= 0 only sets the
// thresholds. Returns false when something was refused.
bool TuneMallocForLargeMessages(char** argv, int arena_max);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_MALLOC_TUNING_H_
