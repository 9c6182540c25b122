#!/usr/bin/env bash
# Packs what the GPU checks (bench/gpu/checks.sh) need on a lent GPU machine into one
# folder that git ignores: the -c opt --config=cuda binaries (dereferenced, with
# step_breakdown's runfiles tree), the Debian shared libraries ldd lists for them (not
# glibc, not CUDA/cuBLAS/NCCL: the GPU machine's own are used) and the Fashion-MNIST
# files, compressed into one archive.
#   bench/gpu/bundle.sh [folder]      (default: .gpu in the repository root)
# Build first (LibTorch left out: its libraries are far too large to carry):
#   bazel build -c opt --config=cuda --repo_env=LIBTORCH_INCLUDE=/nonexistent \
#     //cli:tributary //bench/step_breakdown //bench/engine_bench \
#     //worker/engine:gpu_replica_test //worker/comm:intra_node_reducer_test
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.gpu}
bin=$root/bazel-out/k8-opt/bin
data=${TRIBUTARY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
runfiles=$bin/bench/step_breakdown/step_breakdown.runfiles
[ -d "$runfiles" ] || { echo "bundle.sh: no $runfiles: build first (see the header)" >&2; exit 1; }
cp -rL "$runfiles" "$stage/bin/step_breakdown.runfiles"
# The manifest names this machine's paths; the tree alone is found by directory.
rm -f "$stage/bin/step_breakdown.runfiles/MANIFEST"
cp -L "$bin/bench/step_breakdown/step_breakdown" "$stage/bin/"
for target in bench/engine_bench/engine_bench worker/engine/gpu_replica_test \
    worker/comm/intra_node_reducer_test; do
  [ -f "$bin/$target" ] || { echo "bundle.sh: no $bin/$target: build first" >&2; exit 1; }
  cp -L "$bin/$target" "$stage/bin/"
done
# Each binary has to have been built with CUDA, or the checks would measure the CPU.
for f in "$stage"/bin/gpu_replica_test \
    "$stage"/bin/step_breakdown.runfiles/tributary/worker/worker; do
  ldd "$f" | grep -q libcudart || { echo "bundle.sh: $f is not a --config=cuda build" >&2; exit 1; }
done
find "$stage/bin" -type f -exec strip --strip-debug {} +
# ldd where Bazel left them, so that the tests' rpaths find the _solib_k8 libraries
# their dynamically linked dependencies are.
for f in $(find "$runfiles" -type l) "$bin"/bench/engine_bench/engine_bench \
    "$bin"/worker/engine/gpu_replica_test "$bin"/worker/comm/intra_node_reducer_test; do
  ldd "$(readlink -f "$f")"
done 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  grep -v -E '/(libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp "$data"/*-ubyte.gz "$stage/data/"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib data
cp "$root/bench/gpu/checks.sh" "$out/checks.sh"
du -sh "$out"
