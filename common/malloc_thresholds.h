// glibc malloc thresholds for a process that allocates and frees the same large
// blocks over and over (LibTorch's activations and gradients every step, the PS's
// multi-megabyte messages). By default blocks above 128 KiB are mmapped and unmapped
// each time, and every reuse faults their pages in again, zeroed by the kernel:
// torchscript_bench measured the example language model's training step 5-30% slower
// that way than with the thresholds below (2026-11-27).
#ifndef TRIBUTARY_COMMON_MALLOC_THRESHOLDS_H_
#define TRIBUTARY_COMMON_MALLOC_THRESHOLDS_H_

namespace tributary {

// Blocks up to 32 MiB (glibc's largest mmap threshold on 64-bit) come from the heap
// and are reused; the heap gives memory back only when 1 GiB sits free at its top.
// False when glibc refused a setting (or true without glibc: nothing to do).
bool ReuseLargeBlocks();

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_MALLOC_THRESHOLDS_H_
