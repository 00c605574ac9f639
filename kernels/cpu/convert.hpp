// Internal: scalar conversions of the 16-bit float formats, shared by the
// CPU kernels (exact in both directions where the format allows).
#pragma once

#include <sigma/hal.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sigma_cpu::detail {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE binary16 -> binary32, exact for every input (subnormals included).
// Bit arithmetic rather than _Float16, which not every compiler we build
// with (clang 14 for the fuzzers) has on x86.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    const float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// binary32 -> binary16, round to nearest even; overflow to Inf, NaN kept
// quiet, results below f16's range to subnormals or zero.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504: Inf
  if (a < 0x38800000u) {                           // below 2^-14: a subnormal (or zero) in f16
    const float mag = std::fabs(f) * 16777216.0f;  // units of 2^-24, exact
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(mag)));
  }
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | (((rounded >> 13) - (112u << 10)) & 0x7FFFu));
}

// One f32 / f16 / bf16 element at p, as f32.
inline float load_one(const uint8_t* p, hal_dtype_t dtype) {
  if (dtype == HAL_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == HAL_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace sigma_cpu::detail
