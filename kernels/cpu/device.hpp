// Internal: the bridge from the kernels' entry points to their CUDA versions
// (kernels/cuda/), or to nothing when libsigma is built without CUDA.
#pragma once

#include <sigma/kernels.hpp>

namespace sigma::kernels::device {

// True when `p` is CUDA device (or managed) memory. False without CUDA, or
// without a GPU/driver (checked once).
bool on_device(const void* p);

// The CUDA versions; only called after on_device() said yes. They throw
// sigma::Error(internal) quoting the CUDA error when a launch fails.
ScanResult scan(const void* data, uint64_t count, hal_dtype_t dtype);
void shuffle(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size, bool inverse);
void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes);
uint64_t checksum_parallel(const void* data, uint64_t bytes);
void moe_permute(const void* tokens, uint64_t num_tokens, uint64_t row_bytes, const int64_t* row_of,
                 uint32_t top_k, void* out);
void moe_unpermute(const void* expert_out, const int64_t* row_of, const float* weights, uint64_t num_tokens,
                   uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out);

// The sigma-h64 pieces both twins share.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull, kLenMul = 0xC2B2AE3D27D4EB4Full;
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline uint64_t
    fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace sigma::kernels::device
