// sigma/kernels.hpp's host-memory entries: the CPU kernels' C ABI
// (sigma/cpu_kernels.h, the static library libsigma links), a refusal
// thrown as sigma::Error with the library's message.
#include <sigma/cpu_kernels.h>
#include <sigma/error.hpp>
#include <sigma/kernels.hpp>

#include <string>

namespace sigma::kernels {
namespace {

void kernel_status(hal_status_t st) {
  if (st != HAL_OK) throw Error(from_hal_status(st), sigma_cpu_last_error());
}

}  // namespace

ScanResult grad_scan(const void* data, uint64_t count, hal_dtype_t dtype) {
  hal_kernel_scan_result_t r{};
  kernel_status(sigma_cpu_grad_scan(data, count, dtype, &r));
  return {r.non_finite, r.sum_squares, r.amax};
}

void shuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  kernel_status(sigma_cpu_shuffle(src, nullptr, dst, count, elem_size, 0));
}

void unshuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  kernel_status(sigma_cpu_shuffle(src, nullptr, dst, count, elem_size, 1));
}

// A NULL base is a refusal here, not the plain shuffle the C entry makes of it.
void shuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size) {
  if (count > 0 && base == nullptr) throw Error(Code::invalid_argument, "shuffle_xor_bytes: NULL base");
  kernel_status(sigma_cpu_shuffle(src, base, dst, count, elem_size, 0));
}

void unshuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size) {
  if (count > 0 && base == nullptr) throw Error(Code::invalid_argument, "unshuffle_xor_bytes: NULL base");
  kernel_status(sigma_cpu_shuffle(src, base, dst, count, elem_size, 1));
}

void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes) {
  kernel_status(sigma_cpu_xor(a, b, out, bytes));
}

uint64_t checksum(const void* data, uint64_t bytes) {
  uint64_t h = 0;
  kernel_status(sigma_cpu_xxh3(data, bytes, &h));
  return h;
}

uint64_t checksum_parallel(const void* data, uint64_t bytes) {
  uint64_t h = 0;
  kernel_status(sigma_cpu_h64(data, bytes, &h));
  return h;
}

void moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k, uint32_t num_experts,
              int64_t* row_of, uint64_t* expert_offsets) {
  kernel_status(sigma_cpu_moe_plan(expert_ids, num_tokens, top_k, num_experts, row_of, expert_offsets));
}

void moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden, hal_dtype_t dtype,
                 const int64_t* row_of, uint32_t top_k, void* out) {
  kernel_status(sigma_cpu_moe_permute(tokens, num_tokens, hidden, dtype, row_of, top_k, out));
}

void moe_unpermute(const void* expert_out, const int64_t* row_of, const float* weights, uint64_t num_tokens,
                   uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out) {
  const sigma_cpu_unpermute_args_t a{expert_out, row_of, nullptr, nullptr, weights,
                                     num_tokens, top_k,  dtype,   hidden,  out};
  kernel_status(sigma_cpu_moe_unpermute(&a));
}

void moe_unpermute_split(const void* a, const int64_t* row_of_a, const void* b, const int64_t* row_of_b,
                         const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                         hal_dtype_t dtype, void* out) {
  if (num_tokens * top_k * hidden > 0 && (b == nullptr || row_of_b == nullptr))
    throw Error(Code::invalid_argument, "moe_unpermute_split: NULL buffer");
  const sigma_cpu_unpermute_args_t x{a,          row_of_a, b,     row_of_b, weights,
                                     num_tokens, top_k,    dtype, hidden,   out};
  kernel_status(sigma_cpu_moe_unpermute(&x));
}

Isa active_isa() { return sigma_cpu_active_isa() == SIGMA_CPU_ISA_AVX2 ? Isa::avx2 : Isa::scalar; }

void force_isa(Isa isa) {
  kernel_status(sigma_cpu_force_isa(isa == Isa::avx2 ? SIGMA_CPU_ISA_AVX2 : SIGMA_CPU_ISA_SCALAR));
}

void reset_isa() { sigma_cpu_reset_isa(); }

}  // namespace sigma::kernels
