// The binaries are built for x86-64-v3 (AVX2 and FMA: .bazelrc). On a CPU without them
// the first such instruction would end the process with SIGILL and no word of why. This
// check runs before the program's own static initializers (constructor priority 101)
// and is compiled without those instructions (its BUILD target), so such a CPU gets a
// clear message and exit code 2 instead. `--config=portable` builds without AVX2/FMA.
#include "common/cpu_check.h"

#include <unistd.h>

namespace tributary {

bool CpuHasAvx2AndFma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool BuiltForAvx2AndFma() {
#if defined(TRIBUTARY_AVX2)
  return true;
#else
  return false;
#endif
}

namespace {

#if defined(TRIBUTARY_AVX2)
__attribute__((constructor(101))) void RefuseCpusWithoutAvx2() {
  if (CpuHasAvx2AndFma()) return;
  static const char kMessage[] =
      "tributary: this build uses AVX2 and FMA instructions (x86-64-v3: Intel Haswell, AMD "
      "Zen or newer), which this CPU does not have. Rebuild with `bazel build "
      "--config=portable ...` (slower compute).\n";
  (void)!write(2, kMessage, sizeof(kMessage) - 1);
  _exit(2);
}
#endif

}  // namespace
}  // namespace tributary
