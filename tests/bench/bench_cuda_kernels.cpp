// The cuda vendor's device kernels (HAL_EXT_KERNELS, called through
// libsigma's Place entry points as the engines call them) against the GPU's
// own limit in the same run: the fused
// gradient scan over 1 GiB of device memory (f32 and bf16) vs a
// device-to-device cudaMemcpy of the same bytes (which reads them once and
// writes them once: its read rate is the yardstick), and sigma-h64 vs the
// same copy. Without a GPU every benchmark is skipped with the reason.
//
//   bench_cuda_kernels [--benchmark_repetitions=N]
#include <sigma/hal.hpp>
#include <sigma/kernels.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <vector>

namespace {

constexpr size_t kBytes = size_t{1} << 30;

struct DeviceBuffers {
  void* a = nullptr;
  void* b = nullptr;
  bool ok = false;
  sigma::hal::PluginPtr plugin;
  sigma::kernels::Place where;
  DeviceBuffers() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return;
    plugin = sigma::hal::Plugin::load("cuda");
    where = {plugin.get(), 0};
    if (cudaMalloc(&a, kBytes) != cudaSuccess || cudaMalloc(&b, kBytes) != cudaSuccess) return;
    // Gradient-like f32 values; as bf16 the same bytes are finite small values too.
    std::vector<float> h(kBytes / 4);
    for (size_t i = 0; i < h.size(); ++i)
      h[i] = static_cast<float>(static_cast<int>(i % 2001) - 1000) * 1e-6f;
    ok = cudaMemcpy(a, h.data(), kBytes, cudaMemcpyHostToDevice) == cudaSuccess;
  }
};

DeviceBuffers& buffers() {
  static DeviceBuffers d;
  return d;
}

void BM_CopyD2D(benchmark::State& state) {
  auto& d = buffers();
  if (!d.ok) return state.SkipWithError("no CUDA device");
  for (auto _ : state) {
    cudaMemcpy(d.b, d.a, kBytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kBytes));  // bytes read
}

void BM_GradScan(benchmark::State& state) {
  auto& d = buffers();
  if (!d.ok) return state.SkipWithError("no CUDA device");
  const auto dt = static_cast<hal_dtype_t>(state.range(0));
  const uint64_t n = kBytes / (dt == HAL_DTYPE_F32 ? 4 : 2);
  for (auto _ : state) benchmark::DoNotOptimize(sigma::kernels::grad_scan(d.where, d.a, n, dt));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kBytes));
}

void BM_ChecksumParallel(benchmark::State& state) {
  auto& d = buffers();
  if (!d.ok) return state.SkipWithError("no CUDA device");
  for (auto _ : state) benchmark::DoNotOptimize(sigma::kernels::checksum_parallel(d.where, d.a, kBytes));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kBytes));
}

}  // namespace

BENCHMARK(BM_CopyD2D)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GradScan)->Arg(HAL_DTYPE_F32)->Arg(HAL_DTYPE_BF16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChecksumParallel)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
