// sigma/kernels.hpp -- numeric kernels the engines share (guardrails,
// checkpoints, MoE dispatch).
//
// The plain entry points take host memory and run the CPU version (AVX2
// where the CPU has it, a portable scalar version otherwise, chosen once at
// run time). The entry points that take a Place run on a buffer wherever it
// lives: in host-addressable memory, the CPU version; in a plugin's device
// memory, the plugin's HAL_EXT_KERNELS entry when it offers one, else the
// buffer is copied to host memory through the HAL (device->memcpy) and back.
// Where a buffer lives is asked of the HAL only (hal::Plugin::
// host_addressable); no device pointer is ever read by the host.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>

#include <cstdint>

namespace sigma::hal {
class Plugin;
}

namespace sigma::kernels {

// What one pass over a gradient buffer finds. Non-finite values (NaN, +-Inf)
// are counted and left out of the sum of squares and of amax.
struct ScanResult {
  uint64_t non_finite = 0;
  // Accumulated in fp64. f32 squares are formed in fp64 (relative error
  // ~1e-15); the vector path adds the exact f32 squares of 16-bit inputs in
  // pairs before fp64, so f16/bf16 sums carry a relative error <= 2^-23.
  double sum_squares = 0;
  double amax = 0;  // largest |x| over finite values; 0 for none
};

// One fused pass over `count` elements of f32, f16 or bf16 data at `data`
// (any alignment). Throws sigma::Error(invalid_argument) for another dtype.
// Thread-safety: any thread, concurrently. Blocks: no.
SIGMA_EXPORT ScanResult grad_scan(const void* data, uint64_t count, hal_dtype_t dtype);

// Byte-plane shuffle of `count` elements of `elem_size` bytes: byte b of
// element i goes to dst[b * count + i]. Groups the exponent bytes of floats
// together so a compressor finds them. unshuffle_bytes is its inverse.
// src and dst must not overlap. Thread-safety: any thread, concurrently.
SIGMA_EXPORT void shuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size);
SIGMA_EXPORT void unshuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size);

// The same with a base XORed in, in one pass: the delta of a checkpoint
// chunk against its base, ready to compress. shuffle_xor_bytes writes
// shuffle(src ^ base); unshuffle_xor_bytes writes unshuffle(src) ^ base, so
// unshuffle_xor_bytes(shuffle_xor_bytes(x, base), base) == x. `base` is in
// element order and count * elem_size bytes long; dst overlaps neither input.
// Thread-safety: any thread, concurrently. Blocks: no.
SIGMA_EXPORT void shuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count,
                                    uint32_t elem_size);
SIGMA_EXPORT void unshuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count,
                                      uint32_t elem_size);

// out[i] = a[i] ^ b[i] for `bytes` bytes (out may alias a or b): the delta of
// a checkpoint chunk against its base.
SIGMA_EXPORT void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes);

// xxh3-64 of the bytes, seed 0: the per-chunk checksum of checkpoints.
SIGMA_EXPORT uint64_t checksum(const void* data, uint64_t bytes);

// --- MoE token dispatch ------------------------------------------------------
// Each of num_tokens tokens chose top_k experts: expert_ids[t * top_k + k]
// is in [0, num_experts), or -1 for a choice that was dropped (over an
// expert's capacity). Permuted rows are expert-major and, inside an expert,
// in (token, k) order, so the plan is the same on every run and rank.

// The plan: row_of[t * top_k + k] is the row of the permuted buffer that
// choice goes to (-1 when dropped); expert_offsets[e] .. expert_offsets[e+1]
// are expert e's rows (num_experts + 1 entries; the last is the row count).
// Throws sigma::Error(invalid_argument) for an id outside [-1, num_experts).
// Thread-safety: any thread, concurrently. Blocks: no.
SIGMA_EXPORT void moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k,
                           uint32_t num_experts, int64_t* row_of, uint64_t* expert_offsets);

// Gathers: out[row_of[t * top_k + k]] = tokens[t], rows of `hidden`
// elements of any ABI dtype. `out` has expert_offsets[num_experts] rows.
SIGMA_EXPORT void moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden, hal_dtype_t dtype,
                              const int64_t* row_of, uint32_t top_k, void* out);

// Scatter-adds back with weights: out[t] = sum over k of
// weights[t * top_k + k] * expert_out[row_of[t * top_k + k]] (dropped
// choices add nothing; a token with none gets zeros). f32, f16 or bf16 rows;
// accumulated in f32, written once in the dtype. `out` may not overlap.
SIGMA_EXPORT void moe_unpermute(const void* expert_out, const int64_t* row_of, const float* weights,
                                uint64_t num_tokens, uint32_t top_k, uint64_t hidden, hal_dtype_t dtype,
                                void* out);

// moe_unpermute with each choice's row in one of two buffers: row
// row_of_a[i] of `a` where that is >= 0, else row row_of_b[i] of `b` (both
// -1: dropped). The same sum in the same order, so the same bits as
// moe_unpermute over one buffer holding those rows: what an exchange's
// received rows and a rank's own experts' output are combined with,
// without copying either into one buffer. Thread-safety and errors as
// moe_unpermute.
SIGMA_EXPORT void moe_unpermute_split(const void* a, const int64_t* row_of_a, const void* b,
                                      const int64_t* row_of_b, const float* weights, uint64_t num_tokens,
                                      uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out);

// The GPU-friendly checksum ("sigma-h64"), defined so that a GPU computes
// it in parallel and this CPU twin gives the same value: the bytes are read
// as little-endian 64-bit words w_i (the last one zero-padded), each word is
// mixed with its position, t_i = fmix64(w_i + (i + 1) * 0x9E3779B97F4A7C15),
// the t_i are added modulo 2^64 (in any order), and the result is
// fmix64(sum ^ (bytes * 0xC2B2AE3D27D4EB4F)), fmix64 being MurmurHash3's
// 64-bit finaliser. Any single flipped bit changes it; it is not a
// cryptographic hash. Thread-safety: any thread, concurrently.
SIGMA_EXPORT uint64_t checksum_parallel(const void* data, uint64_t bytes);

// --- On a buffer wherever it lives -------------------------------------------
// `where`: the plugin and device whose memory the buffers are in, or
// {nullptr, 0} for host memory. Every buffer of one call is in the same
// place, except the MoE weights, which are in the same place as the rows.
// Each returns when its outputs are written. The plugin is borrowed.
struct Place {
  const hal::Plugin* plugin = nullptr;
  uint32_t device = 0;
};

SIGMA_EXPORT ScanResult grad_scan(const Place& where, const void* data, uint64_t count, hal_dtype_t dtype);
SIGMA_EXPORT uint64_t checksum_parallel(const Place& where, const void* data, uint64_t bytes);
// shuffle_bytes / shuffle_xor_bytes (inverse false) and their inverses
// (inverse true); `base` may be nullptr.
SIGMA_EXPORT void shuffle(const Place& where, const void* src, const void* base, void* dst, uint64_t count,
                          uint32_t elem_size, bool inverse);
// `row_of` (and `weights`) are in `where` too.
SIGMA_EXPORT void moe_permute(const Place& where, const void* tokens, uint64_t num_tokens, uint64_t hidden,
                              hal_dtype_t dtype, const int64_t* row_of, uint32_t top_k, uint64_t out_rows,
                              void* out);
SIGMA_EXPORT void moe_unpermute(const Place& where, const void* expert_out, uint64_t expert_rows,
                                const int64_t* row_of, const float* weights, uint64_t num_tokens,
                                uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out);

// Which implementation runs. force_isa exists for tests and benchmarks:
// forcing avx2 on a CPU without it throws sigma::Error(not_supported).
enum class Isa { scalar, avx2 };
SIGMA_EXPORT Isa active_isa();
SIGMA_EXPORT void force_isa(Isa isa);
// Forget a forced choice: back to what the CPU supports.
SIGMA_EXPORT void reset_isa();

}  // namespace sigma::kernels
