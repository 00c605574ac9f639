#include "reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace cpu_vendor {
namespace {

// bf16 <-> f32 with round-to-nearest-even; NaN stays NaN.
inline float bf16_to_f32(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu) != 0)
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// f16 through the compiler's IEEE binary16 type (GCC >= 12 on x86-64).
inline float f16_to_f32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline uint16_t f32_to_f16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return std::max(a, b);
  }
};

// Native types: a plain loop the compiler vectorises.
template <typename T, typename Op>
void native(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(Op::apply(x[i], y[i]));
}

// 16-bit floats: widen to f32, reduce, round back (what the hardware does).
template <float (*To)(uint16_t), uint16_t (*From)(float), typename Op>
void half(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = From(Op::apply(To(x[i]), To(y[i])));
}

template <typename Op>
ReduceFn for_dtype(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return native<float, Op>;
    case HAL_DTYPE_F64:
      return native<double, Op>;
    case HAL_DTYPE_I32:
      return native<int32_t, Op>;
    case HAL_DTYPE_I64:
      return native<int64_t, Op>;
    case HAL_DTYPE_U8:
      return native<uint8_t, Op>;
    case HAL_DTYPE_F16:
      return half<f16_to_f32, f32_to_f16, Op>;
    case HAL_DTYPE_BF16:
      return half<bf16_to_f32, f32_to_bf16, Op>;
    default:
      return nullptr;
  }
}

template <typename T>
void divide_native(void* buf, size_t n, uint32_t d) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <float (*To)(uint16_t), uint16_t (*From)(float)>
void divide_half(void* buf, size_t n, uint32_t d) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = From(To(p[i]) / static_cast<float>(d));
}

}  // namespace

ReduceFn reduce_function(hal_dtype_t dtype, hal_reduce_op_t op) {
  switch (op) {
    case HAL_REDUCE_SUM:
    case HAL_REDUCE_AVG:
      return for_dtype<Sum>(dtype);
    case HAL_REDUCE_PROD:
      return for_dtype<Prod>(dtype);
    case HAL_REDUCE_MIN:
      return for_dtype<Min>(dtype);
    case HAL_REDUCE_MAX:
      return for_dtype<Max>(dtype);
    default:
      return nullptr;
  }
}

void divide_by(hal_dtype_t dtype, void* buf, size_t n, uint32_t divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case HAL_DTYPE_F32:
      divide_native<float>(buf, n, divisor);
      break;
    case HAL_DTYPE_F64:
      divide_native<double>(buf, n, divisor);
      break;
    case HAL_DTYPE_I32:
      divide_native<int32_t>(buf, n, divisor);
      break;
    case HAL_DTYPE_I64:
      divide_native<int64_t>(buf, n, divisor);
      break;
    case HAL_DTYPE_U8:
      divide_native<uint8_t>(buf, n, divisor);
      break;
    case HAL_DTYPE_F16:
      divide_half<f16_to_f32, f32_to_f16>(buf, n, divisor);
      break;
    case HAL_DTYPE_BF16:
      divide_half<bf16_to_f32, f32_to_bf16>(buf, n, divisor);
      break;
    default:
      break;
  }
}

void reduce_blocks(hal_dtype_t dtype, hal_reduce_op_t op, void* out, const void* src, size_t n,
                   size_t count) {
  const size_t bytes = n * hal_dtype_size(dtype);
  if (count == 0 || bytes == 0) return;
  const auto* s = static_cast<const uint8_t*>(src);
  std::memmove(out, s, bytes);
  ReduceFn fn = reduce_function(dtype, op);
  for (size_t k = 1; k < count; ++k) fn(out, out, s + k * bytes, n);
}

}  // namespace cpu_vendor
