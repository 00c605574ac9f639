#!/usr/bin/env bash
# The one prepared script for a machine with an NVIDIA GPU: build with CUDA,
# run the cuda vendor's kernels extension (HAL_EXT_KERNELS, reached through
# libsigma's Place entry points) against the CPU kernels, the MoE dispatch
# on GPU memory (NCCL, one rank), the HAL
# conformance suite on the cuda vendor (one rank, one GPU; its kernels.*
# checks included), the cuda vendor's own tests and the GPU kernel
# benchmark (fused scan vs a device-to-device copy).
# Everything it prints and every report lands in $OUT (default ./device-out).
# Budget: well under 8 minutes on a 16-core machine with a warm ccache.
#
#   tests/device/run.sh            # from the repository root
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./device-out}
mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }
status=0

log "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
if [ ! -d device-bundle ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  # Packages when the machine can reach a mirror; a bare machine without one
  # needs them present already (the build below then says what is missing).
  . tools/common.sh && sigma_ensure_packages >"$OUT/apt.log" 2>&1 || log "package setup failed (see apt.log)"
fi

if [ -d device-bundle ]; then
  # Built elsewhere by tests/device/pack.sh (a machine with the Debian
  # packages); NCCL is this machine's own: the CUDA toolkit's, else the one
  # PyTorch's Python packages bring.
  BUILD=$PWD/device-bundle
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH=$BUILD/lib:$BUILD/deps${nccl:+:$nccl}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "using device-bundle (NCCL from ${nccl:-the system})"
else
  BUILD=build/device
  log "configure + build ($BUILD)"
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIGMA_ENABLE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${SIGMA_CUDA_ARCH:-90}" >"$OUT/configure.log" 2>&1 ||
     ! cmake --build "$BUILD" -j"$(nproc)" --target sigma sigma_hal_cuda sigma-hal-conformance \
        unit_kernels_cuda_test unit_kernels_test cuda_vendor_test parallel_dispatch_cuda_test bench_cuda_kernels >"$OUT/build.log" 2>&1; then
    log "BUILD FAILED: tail of the logs:"
    tail -30 "$OUT/configure.log" "$OUT/build.log" | tee -a "$OUT/summary.txt"
    exit 1
  fi
fi
export SIGMA_HAL_PLUGIN_PATH=$(cd "$BUILD" && pwd)/lib/sigma/plugins
# On this machine a GPU is the point: a test that would skip for want of one
# fails instead, and so does any skip at all (a skipped test exits 77).
export SIGMA_REQUIRE_GPU=1

run() {  # name, command...
  local name=$1; shift
  log "run: $name"
  # Exit 77 is a skip (no device); here that is a failure like any other.
  if timeout 240 "$@" >"$OUT/$name.txt" 2>&1; then log "  ok"; else
    local rc=$?; log "  FAILED (exit $rc$([ $rc -eq 77 ] && echo ': skipped, no device')): $(tail -3 "$OUT/$name.txt" | tr '\n' ' ')"; status=1; fi
}
run kernels_cuda_test "$BUILD/bin/unit_kernels_cuda_test" --gtest_output="json:$OUT/kernels_cuda_test.json"
run kernels_cpu_test "$BUILD/bin/unit_kernels_test"
# (The one test of what happens without a GPU is left out: here it cannot run.)
run cuda_vendor_test "$BUILD/bin/cuda_vendor_test" --gtest_filter=-*WithoutAGpu*
run dispatch_cuda_test "$BUILD/bin/parallel_dispatch_cuda_test"
run conformance_cuda_1 "$BUILD/bin/sigma-hal-conformance" --plugin cuda --ranks 1 --json "$OUT/conformance_cuda_1.json"
# Out-of-bounds accesses, uninitialised reads and races in the kernels
# themselves, where the machine's runtime lets the memory checker in.
if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  run memcheck_kernels "$cs" --tool memcheck --error-exitcode 9 "$BUILD/bin/unit_kernels_cuda_test"
  run racecheck_kernels "$cs" --tool racecheck --error-exitcode 9 "$BUILD/bin/unit_kernels_cuda_test"
fi
run bench_cuda_kernels "$BUILD/bin/bench_cuda_kernels" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench_cuda_kernels.json"
if grep -l "^\[ *SKIP" "$OUT"/*_test.txt >/dev/null 2>&1; then
  log "SKIPPED tests on a GPU machine are failures:"
  grep -h "^\[ *SKIP" "$OUT"/*_test.txt | head -10 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  status=1
fi
log "done: $([ $status -eq 0 ] && echo all passed || echo SOMETHING FAILED)"
exit $status
