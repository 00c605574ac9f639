// The cuda vendor's self-test: a GEMM on the device against a host
// reference, a memory pattern test (write patterns on the device, read them
// back, count wrong words) and a device-to-device copy bandwidth.
#include "cuda.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

namespace cuda_vendor {
namespace {

__global__ void gemm(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || j >= n) return;
  float s = 0;
  for (int k = 0; k < n; ++k) s += a[i * n + k] * b[k * n + j];
  c[i * n + j] = s;
}

__global__ void fill(uint64_t* p, uint64_t words, uint64_t pattern) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    p[i] = pattern ^ (i * 0x9E3779B97F4A7C15ull);
}

__global__ void verify(const uint64_t* p, uint64_t words, uint64_t pattern, unsigned long long* errors) {
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    bad += p[i] != (pattern ^ (i * 0x9E3779B97F4A7C15ull));
  if (bad) atomicAdd(errors, bad);
}

// Frees what it holds on every way out.
struct Scope {
  std::vector<void*> ptrs;
  ~Scope() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  cudaError_t alloc(T** p, size_t bytes) {
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) ptrs.push_back(*p);
    return e;
  }
};

}  // namespace

hal_status_t self_test(uint32_t device, uint64_t budget_bytes, hal_self_test_result_t* res) {
  if (res == nullptr || res->struct_size < HAL_SELF_TEST_RESULT_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cuda: result NULL or struct_size too small");
  if (hal_status_t st = use_device(device); st != HAL_OK) return st;
  const uint64_t size = res->struct_size;
  std::memset(res, 0, sizeof(*res));
  res->struct_size = size;
  const auto t0 = std::chrono::steady_clock::now();
  Scope scope;
  cudaError_t e;
#define SIGMA_TRY(call, what) \
  if ((e = (call)) != cudaSuccess) return cuda_fail(e, what)

  // GEMM, 256 x 256, against a double-precision host reference.
  const int n = 256;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
    b[i] = static_cast<float>((i * 53) % 97) / 97.0f - 0.5f;
  }
  float *da, *db, *dc;
  SIGMA_TRY(scope.alloc(&da, a.size() * 4), "cudaMalloc (GEMM)");
  SIGMA_TRY(scope.alloc(&db, b.size() * 4), "cudaMalloc (GEMM)");
  SIGMA_TRY(scope.alloc(&dc, c.size() * 4), "cudaMalloc (GEMM)");
  SIGMA_TRY(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy (GEMM)");
  SIGMA_TRY(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy (GEMM)");
  gemm<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(da, db, dc, n);
  SIGMA_TRY(cudaGetLastError(), "GEMM launch");
  SIGMA_TRY(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (GEMM result)");
  double worst = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < n; ++k)
        ref += static_cast<double>(a[i * n + k]) * b[k * n + j],
            mag += std::fabs(a[i * n + k] * b[k * n + j]);
      worst = std::max(worst, std::fabs(c[i * n + j] - ref) / std::max(mag, 1e-30));
    }
  res->gemm_max_rel_error = worst;

  // Memory patterns over the budget (default 64 MiB).
  const uint64_t bytes =
      std::max<uint64_t>(budget_bytes ? budget_bytes : (64ull << 20), 1 << 20) & ~uint64_t{7};
  uint64_t* mem;
  unsigned long long* errors;
  SIGMA_TRY(scope.alloc(&mem, bytes), "cudaMalloc (pattern test)");
  SIGMA_TRY(scope.alloc(&errors, sizeof(unsigned long long)), "cudaMalloc (pattern test)");
  SIGMA_TRY(cudaMemset(errors, 0, sizeof(unsigned long long)), "cudaMemset");
  for (uint64_t pattern : {0x0ull, ~0x0ull, 0xAAAAAAAAAAAAAAAAull, 0x5555555555555555ull}) {
    fill<<<1024, 256>>>(mem, bytes / 8, pattern);
    verify<<<1024, 256>>>(mem, bytes / 8, pattern, errors);
  }
  SIGMA_TRY(cudaGetLastError(), "pattern test launch");
  unsigned long long bad = 0;
  SIGMA_TRY(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost), "cudaMemcpy (pattern errors)");
  res->memory_pattern_errors = bad;
  res->memory_bytes_tested = bytes;

  // Device-to-device copy bandwidth: half the buffer to the other half.
  cudaEvent_t start, stop;
  SIGMA_TRY(cudaEventCreate(&start), "cudaEventCreate");
  SIGMA_TRY(cudaEventCreate(&stop), "cudaEventCreate");
  const uint64_t half = bytes / 2;
  cudaEventRecord(start);
  for (int i = 0; i < 5; ++i)
    cudaMemcpyAsync(reinterpret_cast<char*>(mem) + half, mem, half, cudaMemcpyDeviceToDevice);
  cudaEventRecord(stop);
  e = cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (e != cudaSuccess) return cuda_fail(e, "copy bandwidth");
  // Each copy reads and writes `half` bytes.
  res->copy_bandwidth = ms > 0 ? 5.0 * 2 * static_cast<double>(half) / (ms * 1e-3) : 0;
#undef SIGMA_TRY

  res->duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res->passed = worst < 1e-4 && bad == 0 && res->copy_bandwidth > 0;
  std::snprintf(res->message, sizeof res->message,
                "GEMM %dx%d max rel error %.3g; %llu wrong words in %llu bytes x 4 patterns; copy %.1f GB/s",
                n, n, worst, bad, static_cast<unsigned long long>(bytes), res->copy_bandwidth / 1e9);
  return HAL_OK;
}

}  // namespace cuda_vendor
