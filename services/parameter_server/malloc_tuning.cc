#include "services/parameter_server/malloc_tuning.h"

#include "common/malloc_thresholds.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tributary::ps {

const char* MallocTunables(int arena_max) {
  static std::string value;
  value = "glibc.malloc.arena_max=" + std::to_string(arena_max) +
          ":glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824";
  return value.c_str();
}

bool TuneMallocForLargeMessages(char** argv, int arena_max) {
#if defined(__GLIBC__)
  if (arena_max > 0) {
    const char* current = std::getenv("GLIBC_TUNABLES");
    if (current == nullptr || std::strstr(current, "glibc.malloc.arena_max") == nullptr) {
      std::string value = MallocTunables(arena_max);
      if (current != nullptr && current[0] != '\0') value = std::string(current) + ":" + value;
      if (setenv("GLIBC_TUNABLES", value.c_str(), 1) == 0) {
        execv("/proc/self/exe", argv);
        // Still here: exec failed; carry on with what mallopt can do.
        std::fprintf(stderr, "warning: cannot re-execute with GLIBC_TUNABLES=%s: %s\n",
                     value.c_str(), std::strerror(errno));
      }
    }
  }
  // Every partition up to 32 MiB is reused from the heap.
  return ReuseLargeBlocks();
#else
  (void)argv;
  (void)arena_max;
  return true;
#endif
}

}  // namespace tributary::ps
