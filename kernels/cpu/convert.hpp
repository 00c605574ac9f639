// Internal: scalar conversions of the 16-bit float formats, shared by the
// CPU kernels (exact in both directions where the format allows).
#pragma once

#include <sigma/hal.h>

#include <cstdint>
#include <cstring>

namespace sigma::kernels::detail {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE binary16 -> binary32 through the compiler's _Float16 (exact,
// subnormals included; one instruction where F16C is enabled).
inline float f16_to_f32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
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

}  // namespace sigma::kernels::detail
