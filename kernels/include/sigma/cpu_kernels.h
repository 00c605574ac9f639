/*
 * sigma/cpu_kernels.h -- libsigma's CPU kernels as a static library with a
 * C ABI (CMake target sigma::cpu_kernels, libsigma_cpu_kernels.a).
 *
 * For a HAL plugin whose device memory the CPU can address (or maps
 * privately, as the sim vendor does) and that wants its HAL_EXT_KERNELS
 * entries to give the host's own results bit for bit. It depends on
 * sigma/hal.h and xxHash only; linking it does not link libsigma. Each
 * kernel runs an AVX2/FMA/F16C version where the CPU has one and a portable
 * one otherwise, chosen once per process (per copy of the library).
 *
 * Every entry returns HAL_OK, or HAL_ERR_INVALID_ARGUMENT (a NULL buffer, a
 * dtype the kernel does not take, an expert id out of range) or
 * HAL_ERR_NOT_SUPPORTED with a message for the calling thread in
 * sigma_cpu_last_error(). Buffers are host memory, borrowed for the call;
 * outputs are written before the call returns.
 * Thread-safety: any thread, concurrently (except sigma_cpu_force_isa and
 * sigma_cpu_reset_isa, which are for tests). Blocks: no.
 */
#ifndef SIGMA_CPU_KERNELS_H_
#define SIGMA_CPU_KERNELS_H_

#include <sigma/hal.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One fused pass over `count` f32, f16 or bf16 values: non-finite values
 * counted and left out of the fp64 sum of squares and of amax. */
hal_status_t sigma_cpu_grad_scan(const void* data, uint64_t count, hal_dtype_t dtype,
                                 hal_kernel_scan_result_t* out);

/* Byte-plane shuffle of `count` elements of `elem_size` bytes (byte b of
 * element i to dst[b * count + i]) with `base` (element order, may be NULL)
 * XORed in: inverse == 0 writes shuffle(src ^ base), inverse != 0 writes
 * unshuffle(src) ^ base. dst overlaps neither input. */
hal_status_t sigma_cpu_shuffle(const void* src, const void* base, void* dst, uint64_t count,
                               uint32_t elem_size, int inverse);

/* out[i] = a[i] ^ b[i] for `bytes` bytes (out may alias a or b). */
hal_status_t sigma_cpu_xor(const void* a, const void* b, void* out, uint64_t bytes);

/* xxh3-64, seed 0 (checkpoints' chunk checksum), and sigma-h64
 * (sigma/hal_support.h; HAL_EXT_KERNELS' checksum). */
hal_status_t sigma_cpu_xxh3(const void* data, uint64_t bytes, uint64_t* out);
hal_status_t sigma_cpu_h64(const void* data, uint64_t bytes, uint64_t* out);

/* MoE dispatch (sigma/kernels.hpp states each in full): the plan from each
 * token's top_k expert ids (-1 dropped); the gather of token rows of
 * `hidden` elements of any ABI dtype; the weighted scatter-add back (f32,
 * f16 or bf16, accumulated in f32), and the same with each choice's row in
 * one of two buffers. */
hal_status_t sigma_cpu_moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k,
                                uint32_t num_experts, int64_t* row_of, uint64_t* expert_offsets);
hal_status_t sigma_cpu_moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden,
                                   hal_dtype_t dtype, const int64_t* row_of, uint32_t top_k, void* out);

typedef struct sigma_cpu_unpermute_args_t {
  const void* rows_a;      /* rows of `hidden` elements of dtype */
  const int64_t* row_of_a; /* num_tokens * top_k rows of rows_a, -1 for none */
  const void* rows_b;      /* NULL for one buffer */
  const int64_t* row_of_b; /* where row_of_a is -1; NULL for one buffer */
  const float* weights;    /* num_tokens * top_k */
  uint64_t num_tokens;
  uint32_t top_k;
  hal_dtype_t dtype; /* f32, f16 or bf16 */
  uint64_t hidden;
  void* out; /* num_tokens rows; overlaps no input */
} sigma_cpu_unpermute_args_t;
hal_status_t sigma_cpu_moe_unpermute(const sigma_cpu_unpermute_args_t* args);

/* Which version runs: SIGMA_CPU_ISA_SCALAR or SIGMA_CPU_ISA_AVX2. Forcing
 * AVX2 on a CPU without it is HAL_ERR_NOT_SUPPORTED. */
#define SIGMA_CPU_ISA_SCALAR 0
#define SIGMA_CPU_ISA_AVX2 1
int sigma_cpu_active_isa(void);
hal_status_t sigma_cpu_force_isa(int isa);
void sigma_cpu_reset_isa(void);

/* The calling thread's message for its last failed call ("" if none). The
 * string is the library's, valid until the thread's next call. */
const char* sigma_cpu_last_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIGMA_CPU_KERNELS_H_ */
