#!/usr/bin/env bash
# Builds the GPU checks on this machine (the default preset, CUDA on) and
# copies them, with the shared libraries they need that a GPU machine's
# image may lack, into device-bundle/. For a GPU machine that cannot install
# Debian packages: copy the bundle there beside the checkout and run
# tests/device/run.sh, which uses it instead of building.
# NCCL (200+ MiB) stays behind: run.sh finds the GPU machine's own.
#
#   tests/device/pack.sh           # from the repository root
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/common.sh
sigma_build default
B=build/default
[ -f "$B/lib/sigma/plugins/libsigma_hal_cuda.so" ] || {
  echo "pack.sh: the default build has no cuda vendor (no CUDA compiler found?)" >&2; exit 1; }
BUNDLE=device-bundle
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib/sigma/plugins" "$BUNDLE/deps"
BINS=(unit_kernels_cuda_test unit_kernels_test cuda_vendor_test parallel_dispatch_cuda_test sigma-hal-conformance bench_cuda_kernels)
for b in "${BINS[@]}"; do cp "$B/bin/$b" "$BUNDLE/bin/"; done
cp -P "$B"/lib/libsigma.so* "$BUNDLE/lib/"
cp "$B"/lib/sigma/plugins/*.so "$BUNDLE/lib/sigma/plugins/"
# Every library the binaries and plugins load, except the C library, the C++
# runtime (the GPU machine has its own, no older) and NCCL.
keep() { case "$1" in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libnccl.so*|libsigma.so*|linux-vdso*|ld-linux*) return 1;; esac; }
ldd "$BUNDLE"/bin/* "$BUNDLE"/lib/sigma/plugins/*.so 2>/dev/null | awk '/=> \//{print $1, $3}' | sort -u |
  while read -r name path; do keep "$name" && cp -L "$path" "$BUNDLE/deps/$name"; done
du -sh "$BUNDLE"
ls "$BUNDLE/deps"
