#include "common/malloc_thresholds.h"

#include <cstdlib>  // Defines __GLIBC__ (through <features.h>) where glibc is the libc.

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tributary {

bool ReuseLargeBlocks() {
#if defined(__GLIBC__)
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
#else
  return true;
#endif
}

}  // namespace tributary
