#include "dispatch.hpp"

#include <cpuid.h>

namespace sigma_cpu {
namespace detail {

std::atomic<int> g_isa{-1};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has
  // no name for it. The avx2 check covers the OS's saving of YMM state.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

}  // namespace detail

Isa active_isa() { return detail::isa(); }

void force_isa(Isa isa) {
  if (isa == Isa::avx2 && !detail::cpu_has_avx2()) {
    refuse(HAL_ERR_NOT_SUPPORTED, "kernels: this CPU has no AVX2/FMA/F16C");
  }
  detail::g_isa.store(static_cast<int>(isa));
}

void reset_isa() { detail::g_isa.store(-1); }

ScanResult grad_scan(const void* data, uint64_t count, hal_dtype_t dtype) {
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16) {
    refuse(HAL_ERR_INVALID_ARGUMENT,
           "grad_scan: dtype " + std::to_string(dtype) + " is not f32, f16 or bf16");
  }
  if (count > 0 && data == nullptr) refuse(HAL_ERR_INVALID_ARGUMENT, "grad_scan: NULL data");
  return detail::isa() == Isa::avx2 ? detail::scan_avx2(data, count, dtype)
                                    : detail::scan_scalar(data, count, dtype);
}

}  // namespace sigma_cpu
