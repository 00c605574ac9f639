// The short validation the scheduler runs before admitting this device: a
// GEMM against a double-precision reference, a memory pattern test, and the
// copy bandwidth.
#include "common.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace cpu_vendor {
namespace {

// fp32 GEMM in i-k-j order against an fp64 reference in i-j-k order.
double gemm_max_rel_error(int n) {
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  std::vector<double> ref(n * n, 0.0);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7 % 13) - 6) / 8.0f;
    b[i] = static_cast<float>((i * 5 % 11) - 5) / 4.0f;
  }
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += static_cast<double>(a[i * n + k]) * b[k * n + j];
      ref[i * n + j] = s;
    }
  double worst = 0;
  for (int i = 0; i < n * n; ++i)
    worst = std::max(worst, std::fabs(c[i] - ref[i]) / (std::fabs(ref[i]) + 1.0));
  return worst;
}

}  // namespace

hal_status_t self_test(uint32_t device, uint64_t budget, hal_self_test_result_t* r) {
  if (r == nullptr || r->struct_size < HAL_SELF_TEST_RESULT_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: result NULL or struct_size too small");
  if (hal_status_t st = check_device(device); st != HAL_OK) return st;
  const uint64_t size = r->struct_size;
  std::memset(r, 0, sizeof(*r));
  r->struct_size = size;
  const uint64_t t0 = now_ns();
  r->gemm_max_rel_error = gemm_max_rel_error(128);

  const uint64_t bytes = std::min<uint64_t>(budget ? budget : (64ull << 20), 1ull << 30);
  const size_t words = static_cast<size_t>(bytes / 8);
  std::unique_ptr<uint64_t[]> buf(new (std::nothrow) uint64_t[words]);
  std::unique_ptr<uint64_t[]> copy(new (std::nothrow) uint64_t[words]);
  if (!buf || !copy)
    return fail(HAL_ERR_OUT_OF_MEMORY, "cpu: self-test buffers of " + std::to_string(bytes) + " bytes");
  // Two patterns: address-derived words and their complement, so every bit
  // is seen both as 0 and as 1. volatile: the read-back must touch memory.
  volatile uint64_t* v = buf.get();
  for (uint64_t pattern : {0x9E3779B97F4A7C15ull, ~0x9E3779B97F4A7C15ull}) {
    for (size_t i = 0; i < words; ++i) v[i] = i * pattern;
    for (size_t i = 0; i < words; ++i)
      if (v[i] != i * pattern) ++r->memory_pattern_errors;
  }
  r->memory_bytes_tested = static_cast<uint64_t>(words) * 8 * 2;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const uint64_t c0 = now_ns();
    std::memcpy(copy.get(), buf.get(), words * 8);
    const uint64_t c1 = now_ns();
    best = std::max(best, static_cast<double>(words * 8) / (static_cast<double>(c1 - c0 + 1) * 1e-9));
  }
  if (std::memcmp(copy.get(), buf.get(), words * 8) != 0) ++r->memory_pattern_errors;
  r->copy_bandwidth = best;
  r->passed = r->gemm_max_rel_error < 1e-4 && r->memory_pattern_errors == 0 && best > 0;
  r->duration_s = static_cast<double>(now_ns() - t0) * 1e-9;
  std::snprintf(r->message, sizeof(r->message),
                "gemm rel err %.2e, %llu pattern errors over %llu MiB, copy %.1f GB/s", r->gemm_max_rel_error,
                static_cast<unsigned long long>(r->memory_pattern_errors),
                static_cast<unsigned long long>(r->memory_bytes_tested >> 20), best * 1e-9);
  return HAL_OK;
}

}  // namespace cpu_vendor
