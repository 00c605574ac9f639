#include "dispatch.hpp"

#include <sigma/error.hpp>

namespace sigma::kernels {
namespace detail {

std::atomic<int> g_isa{-1};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // namespace detail

Isa active_isa() { return detail::isa(); }

void force_isa(Isa isa) {
  if (isa == Isa::avx2 && !detail::cpu_has_avx2()) {
    throw Error(Code::not_supported, "kernels: this CPU has no AVX2/FMA/F16C");
  }
  detail::g_isa.store(static_cast<int>(isa));
}

void reset_isa() { detail::g_isa.store(-1); }

ScanResult grad_scan(const void* data, uint64_t count, hal_dtype_t dtype) {
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16) {
    throw Error(Code::invalid_argument, "grad_scan: dtype " + std::to_string(dtype) + " is not f32, f16 or bf16");
  }
  if (count > 0 && data == nullptr) throw Error(Code::invalid_argument, "grad_scan: NULL data");
  return detail::isa() == Isa::avx2 ? detail::scan_avx2(data, count, dtype) : detail::scan_scalar(data, count, dtype);
}

}  // namespace sigma::kernels
