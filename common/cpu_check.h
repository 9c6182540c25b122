// What the CPU and the build support: the engine and the PS's loops are compiled for
// AVX2 + FMA (x86-64-v3) unless built with --config=portable. Linking :cpu_check into
// a binary makes it refuse, with a clear message and exit code 2, to start on a CPU
// without them.
#ifndef TRIBUTARY_COMMON_CPU_CHECK_H_
#define TRIBUTARY_COMMON_CPU_CHECK_H_

namespace tributary {

// Whether this CPU executes AVX2 and FMA instructions.
bool CpuHasAvx2AndFma();
// Whether this build uses them (false under --config=portable).
bool BuiltForAvx2AndFma();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_CPU_CHECK_H_
