// The C ABI of sigma/cpu_kernels.h over the library's C++ kernels: a
// refusal becomes its status and the calling thread's message.
#include "cpu.hpp"

#include <sigma/cpu_kernels.h>

#include <exception>
#include <string>

namespace {

thread_local std::string t_error;

template <typename F>
hal_status_t guarded(F&& body) {
  try {
    body();
    t_error.clear();
    return HAL_OK;
  } catch (const sigma_cpu::Failure& f) {
    t_error = f.message;
    return f.status;
  } catch (const std::bad_alloc&) {
    t_error = "out of memory";
    return HAL_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    t_error = e.what();
    return HAL_ERR_INTERNAL;
  }
}

}  // namespace

extern "C" {

hal_status_t sigma_cpu_grad_scan(const void* data, uint64_t count, hal_dtype_t dtype,
                                 hal_kernel_scan_result_t* out) {
  return guarded([&] {
    if (out == nullptr) sigma_cpu::refuse(HAL_ERR_INVALID_ARGUMENT, "grad_scan: NULL result");
    const sigma_cpu::ScanResult r = sigma_cpu::grad_scan(data, count, dtype);
    *out = {r.non_finite, r.sum_squares, r.amax};
  });
}

hal_status_t sigma_cpu_shuffle(const void* src, const void* base, void* dst, uint64_t count,
                               uint32_t elem_size, int inverse) {
  return guarded([&] {
    if (base == nullptr)
      (inverse ? sigma_cpu::unshuffle_bytes : sigma_cpu::shuffle_bytes)(src, dst, count, elem_size);
    else
      (inverse ? sigma_cpu::unshuffle_xor_bytes : sigma_cpu::shuffle_xor_bytes)(src, base, dst, count,
                                                                                elem_size);
  });
}

hal_status_t sigma_cpu_xor(const void* a, const void* b, void* out, uint64_t bytes) {
  return guarded([&] { sigma_cpu::xor_bytes(a, b, out, bytes); });
}

hal_status_t sigma_cpu_xxh3(const void* data, uint64_t bytes, uint64_t* out) {
  return guarded([&] {
    if (out == nullptr) sigma_cpu::refuse(HAL_ERR_INVALID_ARGUMENT, "checksum: NULL result");
    *out = sigma_cpu::checksum(data, bytes);
  });
}

hal_status_t sigma_cpu_h64(const void* data, uint64_t bytes, uint64_t* out) {
  return guarded([&] {
    if (out == nullptr) sigma_cpu::refuse(HAL_ERR_INVALID_ARGUMENT, "checksum_parallel: NULL result");
    *out = sigma_cpu::checksum_parallel(data, bytes);
  });
}

hal_status_t sigma_cpu_moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k,
                                uint32_t num_experts, int64_t* row_of, uint64_t* expert_offsets) {
  return guarded(
      [&] { sigma_cpu::moe_plan(expert_ids, num_tokens, top_k, num_experts, row_of, expert_offsets); });
}

hal_status_t sigma_cpu_moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden,
                                   hal_dtype_t dtype, const int64_t* row_of, uint32_t top_k, void* out) {
  return guarded([&] { sigma_cpu::moe_permute(tokens, num_tokens, hidden, dtype, row_of, top_k, out); });
}

hal_status_t sigma_cpu_moe_unpermute(const sigma_cpu_unpermute_args_t* a) {
  return guarded([&] {
    if (a == nullptr) sigma_cpu::refuse(HAL_ERR_INVALID_ARGUMENT, "moe_unpermute: NULL arguments");
    if (a->rows_b == nullptr && a->row_of_b == nullptr)
      sigma_cpu::moe_unpermute(a->rows_a, a->row_of_a, a->weights, a->num_tokens, a->top_k, a->hidden,
                               a->dtype, a->out);
    else
      sigma_cpu::moe_unpermute_split(a->rows_a, a->row_of_a, a->rows_b, a->row_of_b, a->weights,
                                     a->num_tokens, a->top_k, a->hidden, a->dtype, a->out);
  });
}

int sigma_cpu_active_isa(void) {
  return sigma_cpu::active_isa() == sigma_cpu::Isa::avx2 ? SIGMA_CPU_ISA_AVX2 : SIGMA_CPU_ISA_SCALAR;
}

hal_status_t sigma_cpu_force_isa(int isa) {
  return guarded([&] {
    if (isa != SIGMA_CPU_ISA_SCALAR && isa != SIGMA_CPU_ISA_AVX2)
      sigma_cpu::refuse(HAL_ERR_INVALID_ARGUMENT, "kernels: no ISA " + std::to_string(isa));
    sigma_cpu::force_isa(isa == SIGMA_CPU_ISA_AVX2 ? sigma_cpu::Isa::avx2 : sigma_cpu::Isa::scalar);
  });
}

void sigma_cpu_reset_isa(void) { sigma_cpu::reset_isa(); }

const char* sigma_cpu_last_error(void) { return t_error.c_str(); }

}  // extern "C"
