// Internal: the run-time choice between the scalar and the AVX2 kernels.
#pragma once

#include <sigma/kernels.hpp>

#include <atomic>

namespace sigma::kernels::detail {

extern std::atomic<int> g_isa;  // Isa, or -1 before the first use
bool cpu_has_avx2();
inline Isa isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(cpu_has_avx2() ? Isa::avx2 : Isa::scalar);
    g_isa.store(v, std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

ScanResult scan_scalar(const void* data, uint64_t count, hal_dtype_t dtype);
ScanResult scan_avx2(const void* data, uint64_t count, hal_dtype_t dtype);

}  // namespace sigma::kernels::detail
