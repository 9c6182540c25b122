#!/usr/bin/env bash
# The GPU checks of a lent machine, in one run (docs/performance.md "On a GPU: one H200"):
#   run: cd .gpu && bash checks.sh      (carry .gpu; bench/gpu/bundle.sh made it)
# Unpacks the bundle, points the binaries at the machine's own CUDA, cuBLAS and NCCL,
# puts Fashion-MNIST where the job looks, then runs gpu_replica_test, the one-rank NCCL
# reduction, step_breakdown --device=gpu (SYNC and LOCAL_SGD with the even cut and with
# the default automatic one, which gives SYNC on a GPU the layer cut; the CNN) and
# compute-sanitizer's memcheck over gpu_replica_test. Each step has its own time limit
# and all stay inside $CHECKS_SECONDS (540); the logs go to $OUT (or ./out), the
# verdicts to summary.txt.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
work=$(mktemp -d)
tar -C "$work" -xJf "$here/bundle.tar.xz" || { say "cannot unpack the bundle"; exit 1; }
mkdir -p /usr/share/datasets/fashion-mnist
cp "$work"/data/*.gz /usr/share/datasets/fashion-mnist/

# The machine's CUDA runtime, cuBLAS and NCCL: wherever the first of each is found.
libs=$work/lib
for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(find -H /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /opt /usr/lib /usr/local/lib \
              -name "$name" 2>/dev/null | head -1)
  [ -n "$found" ] && libs=$libs:$(dirname "$found")
  say "$name: ${found:-NOT FOUND}"
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"

budget=${CHECKS_SECONDS:-540}  # All steps together stay inside this (the run's own limit).
step() {  # step NAME SECONDS COMMAND...: runs it under a limit, logs it, records the verdict.
  local name=$1 limit=$2; shift 2
  local start=$SECONDS left=$((budget - SECONDS - 5))
  if [ "$left" -lt 20 ]; then say "$name: not run, the budget is spent"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  say "$name: rc=$rc in $((SECONDS - start)) s"
}
bin=$work/bin
sb() {  # step_breakdown NAME SECONDS FLAGS...
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" "$bin/step_breakdown" --device=gpu --min_seconds=1 "$@"
  grep -E '^(compute-only|SYNC|LOCAL_SGD)' "$out/$name.log" | tee -a "$summary"
}
step gpu_replica_test 120 "$bin/gpu_replica_test"
grep -E '^\[ +(OK|FAILED|SKIPPED) ' "$out/gpu_replica_test.log" | tee -a "$summary"
step nccl_one_rank 60 "$bin/intra_node_reducer_test"
grep -E '^\[ +(FAILED|SKIPPED) |PASSED' "$out/nccl_one_rank.log" | tee -a "$summary"
sb sb_mlp_even 150 --partition_cut=even --local_sgd_sync_every=64
sb sb_cnn 150 --model=cnn --local_sgd=false
sanitizer=$(command -v compute-sanitizer ||
            ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ]; then
  step memcheck 180 "$sanitizer" --tool memcheck --error-exitcode=3 "$bin/gpu_replica_test"
  grep -E 'ERROR SUMMARY|^\[ +(OK|FAILED) ' "$out/memcheck.log" | tee -a "$summary"
else
  say "memcheck: no compute-sanitizer on this machine"
fi
sb sb_mlp_auto 120 --local_sgd_sync_every=64
say "done at $(date -u +%FT%TZ)"
