#include "reference.hpp"

#include <sigma/hal.hpp>

#include <cmath>
#include <cstring>
#include <limits>

namespace sigma::conformance {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | half);
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7FFFu + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

HostArray::HostArray(hal_dtype_t dtype, uint64_t n)
    : dtype_(dtype), n_(n), esize_(hal::dtype_size(dtype)), bytes_(n * esize_ + 1, 0) {}

void HostArray::set(uint64_t i, double v) {
  uint8_t* p = bytes_.data() + i * esize_;
  switch (dtype_) {
    case HAL_DTYPE_F32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case HAL_DTYPE_F64:
      std::memcpy(p, &v, 8);
      break;
    case HAL_DTYPE_F16: {
      uint16_t h = float_to_half(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case HAL_DTYPE_BF16: {
      uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case HAL_DTYPE_I32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case HAL_DTYPE_I64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case HAL_DTYPE_U8: {
      uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v) & 0xFF);
      *p = x;
      break;
    }
    default:
      break;
  }
}

double HostArray::get(uint64_t i) const { return hal::element_as_double(bytes_.data() + i * esize_, dtype_); }

double input_value(hal_dtype_t dtype, bool reducing, hal_reduce_op_t red, uint32_t rank, uint64_t i) {
  const uint64_t h = (static_cast<uint64_t>(rank) * 2654435761u + i * 40503u + 17) >> 3;
  const bool is_unsigned = dtype == HAL_DTYPE_U8;
  if (!reducing) return static_cast<double>((rank * 13 + i * 3) % 97);  // exact in bf16 and u8
  if (red == HAL_REDUCE_PROD) {
    static const double signed_vals[] = {1, 2, -1};
    return is_unsigned ? static_cast<double>(1 + h % 2) : signed_vals[h % 3];
  }
  return is_unsigned ? static_cast<double>(h % 5) : static_cast<double>(h % 5) - 2.0;
}

double reduced_value(hal_dtype_t dtype, hal_reduce_op_t red, uint32_t world, uint64_t i) {
  const bool is_int = dtype == HAL_DTYPE_I32 || dtype == HAL_DTYPE_I64 || dtype == HAL_DTYPE_U8;
  double acc = input_value(dtype, true, red, 0, i);
  for (uint32_t r = 1; r < world; ++r) {
    const double v = input_value(dtype, true, red, r, i);
    switch (red) {
      case HAL_REDUCE_SUM:
      case HAL_REDUCE_AVG:
        acc += v;
        break;
      case HAL_REDUCE_PROD:
        acc *= v;
        break;
      case HAL_REDUCE_MIN:
        acc = std::min(acc, v);
        break;
      case HAL_REDUCE_MAX:
        acc = std::max(acc, v);
        break;
      default:
        break;
    }
  }
  if (dtype == HAL_DTYPE_U8) acc = static_cast<double>(static_cast<int64_t>(acc) & 0xFF);
  if (red == HAL_REDUCE_AVG) {
    if (is_int) return static_cast<double>(static_cast<int64_t>(acc) / static_cast<int64_t>(world));
    return acc / world;
  }
  return acc;
}

bool close_enough(hal_dtype_t dtype, double got, double want) {
  double rel = 0;
  switch (dtype) {
    case HAL_DTYPE_F32:
      rel = 1e-6;
      break;
    case HAL_DTYPE_F64:
      rel = 1e-12;
      break;
    case HAL_DTYPE_F16:
      rel = 2e-3;
      break;
    case HAL_DTYPE_BF16:
      rel = 1.6e-2;
      break;
    default:
      return got == want;
  }
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

}  // namespace sigma::conformance
