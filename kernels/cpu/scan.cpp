// The fused gradient scan: non-finite count, fp64 sum of squares and amax in
// one pass over f32, f16 or bf16 data.
#include "dispatch.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace sigma::kernels::detail {
namespace {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE binary16 -> binary32, exact for every input (subnormals included).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

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

void scan_tail(const uint8_t* p, uint64_t n, hal_dtype_t dtype, ScanResult& r) {
  const size_t es = dtype == HAL_DTYPE_F32 ? 4 : 2;
  for (uint64_t i = 0; i < n; ++i) {
    const float v = load_one(p + i * es, dtype);
    if (!std::isfinite(v)) {
      ++r.non_finite;
      continue;
    }
    const double d = v;
    r.sum_squares += d * d;
    r.amax = std::max(r.amax, std::fabs(d));
  }
}

// Eight elements as f32, whatever the storage type.
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint8_t* p, hal_dtype_t dtype) {
  if (dtype == HAL_DTYPE_F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (dtype == HAL_DTYPE_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

}  // namespace

ScanResult scan_scalar(const void* data, uint64_t count, hal_dtype_t dtype) {
  ScanResult r;
  scan_tail(static_cast<const uint8_t*>(data), count, dtype, r);
  return r;
}

__attribute__((target("avx2,fma,f16c"))) ScanResult scan_avx2(const void* data, uint64_t count, hal_dtype_t dtype) {
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t es = dtype == HAL_DTYPE_F32 ? 4 : 2;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), s2 = _mm256_setzero_pd(), s3 = _mm256_setzero_pd();
  __m256 amax0 = _mm256_setzero_ps(), amax1 = _mm256_setzero_ps();
  uint64_t bad = 0;
  uint64_t i = 0;
  // Two blocks of eight per step: independent chains keep the FMA units fed.
  for (; i + 16 <= count; i += 16) {
    const __m256 x0 = load8(p + i * es, dtype), x1 = load8(p + (i + 8) * es, dtype);
    const __m256 a0 = _mm256_and_ps(x0, abs_mask), a1 = _mm256_and_ps(x1, abs_mask);
    // |x| < inf is false for Inf and NaN: the finite lanes.
    const __m256 f0 = _mm256_cmp_ps(a0, inf, _CMP_LT_OQ), f1 = _mm256_cmp_ps(a1, inf, _CMP_LT_OQ);
    bad += 16 - static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(f0)) + __builtin_popcount(_mm256_movemask_ps(f1)));
    const __m256 v0 = _mm256_and_ps(x0, f0), v1 = _mm256_and_ps(x1, f1);
    amax0 = _mm256_max_ps(amax0, _mm256_and_ps(a0, f0));
    amax1 = _mm256_max_ps(amax1, _mm256_and_ps(a1, f1));
    const __m256d l0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v0)), h0 = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
    const __m256d l1 = _mm256_cvtps_pd(_mm256_castps256_ps128(v1)), h1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
    s0 = _mm256_fmadd_pd(l0, l0, s0);
    s1 = _mm256_fmadd_pd(h0, h0, s1);
    s2 = _mm256_fmadd_pd(l1, l1, s2);
    s3 = _mm256_fmadd_pd(h1, h1, s3);
  }
  alignas(32) double sums[4];
  _mm256_store_pd(sums, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
  alignas(32) float maxes[8];
  _mm256_store_ps(maxes, _mm256_max_ps(amax0, amax1));
  ScanResult r;
  r.non_finite = bad;
  r.sum_squares = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  for (float m : maxes) r.amax = std::max(r.amax, static_cast<double>(m));
  scan_tail(p + i * es, count - i, dtype, r);
  return r;
}

}  // namespace sigma::kernels::detail
