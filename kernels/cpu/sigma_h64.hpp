// The sigma-h64 checksum's mixing, shared by the CPU kernel and every
// vendor's device version (sigma/kernels.hpp defines the checksum). Header
// only, no dependencies: a plugin compiles it into its own kernels.
#pragma once

#include <cstdint>

namespace sigma::kernels::h64 {

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

}  // namespace sigma::kernels::h64
