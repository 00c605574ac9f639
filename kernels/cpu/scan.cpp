// The fused gradient scan: non-finite count, fp64 sum of squares and amax in
// one pass over f32, f16 or bf16 data.
#include "convert.hpp"
#include "dispatch.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sigma_cpu::detail {
namespace {

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

}  // namespace

ScanResult scan_scalar(const void* data, uint64_t count, hal_dtype_t dtype) {
  ScanResult r;
  scan_tail(static_cast<const uint8_t*>(data), count, dtype, r);
  return r;
}

namespace {

// Sum of squares of eight f32 lanes into two fp64 accumulators.
__attribute__((target("avx2,fma,f16c"))) inline void add_squares(__m256 v, __m256d& lo, __m256d& hi) {
  const __m256d l = _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                h = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  lo = _mm256_fmadd_pd(l, l, lo);
  hi = _mm256_fmadd_pd(h, h, hi);
}

__attribute__((target("avx2,fma,f16c"))) double hsum(__m256d a) {
  alignas(32) double s[4];
  _mm256_store_pd(s, a);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Sixteen f32 values: |x| bits into amax (an unsigned max: non-negative
// IEEE patterns order like their values, and NaN/Inf are above all finite
// ones), squares into four fp64 chains. The exact form also counts the
// non-finite values and leaves them out; the fast form assumes there are
// none, which the caller checks from amax afterwards.
template <bool kExact>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void f32_step(const uint8_t* p, __m256i& bad,
                                                                             __m256i& amax, __m256d s[4]) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  for (size_t k = 0; k < 2; ++k) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
    __m256i v = _mm256_and_si256(x, abs_mask);
    if constexpr (kExact) {
      // |x| bits above Inf's are NaN; equal is Inf.
      const __m256i nonfinite = _mm256_cmpgt_epi32(v, _mm256_sub_epi32(inf, _mm256_set1_epi32(1)));
      bad = _mm256_sub_epi32(bad, nonfinite);
      v = _mm256_andnot_si256(nonfinite, v);
    }
    amax = _mm256_max_epu32(amax, v);
    add_squares(_mm256_castsi256_ps(kExact ? v : x), s[2 * k], s[2 * k + 1]);
  }
}

__attribute__((target("avx2,fma,f16c"))) ScanResult scan_f32_avx2(const uint8_t* p, uint64_t count) {
  constexpr uint64_t kBlock = uint64_t{16} * 16384;
  __m256d total[4];
  for (auto& t : total) t = _mm256_setzero_pd();
  ScanResult r;
  uint32_t top = 0;
  uint64_t i = 0;
  for (; i + 16 <= count; i = std::min<uint64_t>(count & ~uint64_t{15}, i + kBlock)) {
    const uint64_t n = std::min<uint64_t>(count & ~uint64_t{15}, i + kBlock) - i;
    const uint8_t* q = p + i * 4;
    __m256d s[4];
    for (auto& a : s) a = _mm256_setzero_pd();
    __m256i bad = _mm256_setzero_si256(), amax = _mm256_setzero_si256();
    for (uint64_t j = 0; j < n; j += 16) f32_step<false>(q + j * 4, bad, amax, s);
    alignas(32) uint32_t m[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(m), amax);
    uint32_t block_top = *std::max_element(m, m + 8);
    if (block_top >= 0x7F800000u) {  // a NaN or Inf: again, counting them
      for (auto& a : s) a = _mm256_setzero_pd();
      amax = _mm256_setzero_si256();
      for (uint64_t j = 0; j < n; j += 16) f32_step<true>(q + j * 4, bad, amax, s);
      alignas(32) uint32_t c[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(c), bad);
      for (uint32_t b : c) r.non_finite += b;
      _mm256_store_si256(reinterpret_cast<__m256i*>(m), amax);
      block_top = *std::max_element(m, m + 8);
    }
    top = std::max(top, block_top);
    for (size_t k = 0; k < 4; ++k) total[k] = _mm256_add_pd(total[k], s[k]);
  }
  r.sum_squares = hsum(_mm256_add_pd(_mm256_add_pd(total[0], total[1]), _mm256_add_pd(total[2], total[3])));
  float amax;
  std::memcpy(&amax, &top, 4);
  r.amax = amax;
  scan_tail(p + i * 4, count - i, HAL_DTYPE_F32, r);
  return r;
}

// One vector of sixteen 16-bit floats. The exact form counts the non-finite
// values, leaves them out, and squares every element in fp64. The fast form
// assumes all are finite (the caller checks amax afterwards: a NaN or Inf
// has the largest |x| bit pattern of all) and adds squares in pairs.
template <bool kBf16, bool kExact>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void half_step(__m256i x, __m256i& bad16,
                                                                              __m256i& amax, __m256d& a,
                                                                              __m256d& b) {
  const __m256i abs_mask = _mm256_set1_epi16(0x7FFF);
  __m256i v = _mm256_and_si256(x, abs_mask);
  if constexpr (kExact) {
    const __m256i exp_mask = _mm256_set1_epi16(static_cast<short>(kBf16 ? 0x7F80 : 0x7C00));
    const __m256i nonfinite = _mm256_cmpeq_epi16(_mm256_and_si256(x, exp_mask), exp_mask);
    bad16 = _mm256_sub_epi16(bad16, nonfinite);
    v = _mm256_andnot_si256(nonfinite, v);
  }
  amax = _mm256_max_epu16(amax, v);
  // The sign does not change a square: convert x itself in the fast form.
  const __m256i y = kExact ? v : x;
  __m256 lo, hi;
  if constexpr (kBf16) {
    // bf16 is the top half of an f32: interleave zeros below it.
    const __m256i zero = _mm256_setzero_si256();
    lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, y));
    hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, y));
  } else {
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(y));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(y, 1));
  }
  if constexpr (kExact) {
    add_squares(lo, a, b);
    add_squares(hi, a, b);
    return;
  }
  // The square of a 16-bit float is exact in f32 (at most 22 significant
  // bits). Adding two of them in f32 is the one rounding (relative 2^-24);
  // the pair sums then go to fp64. Half the f32 -> f64 conversions, which
  // are what the loop is bound by.
  const __m256 pairs = _mm256_fmadd_ps(lo, lo, _mm256_mul_ps(hi, hi));
  a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(pairs)));
  b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm256_extractf128_ps(pairs, 1)));
}

// One block of 16-bit floats (a multiple of 32 elements, at most kBlock):
// its non-finite count and top |x| bits into r/top, its squares into s.
template <bool kBf16, bool kExact>
__attribute__((target("avx2,fma,f16c"))) uint16_t scan_half_block(const uint8_t* p, uint64_t n,
                                                                  uint64_t& non_finite, __m256d s[4]) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i bad16 = zero, amax = zero;
  for (uint64_t i = 0; i < n; i += 32) {
    half_step<kBf16, kExact>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * 2)), bad16, amax,
                             s[0], s[1]);
    half_step<kBf16, kExact>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * 2 + 32)), bad16,
                             amax, s[2], s[3]);
  }
  alignas(32) uint16_t c[16], m[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(c), bad16);
  _mm256_store_si256(reinterpret_cast<__m256i*>(m), amax);
  uint16_t top = 0;
  for (int k = 0; k < 16; ++k) {
    non_finite += c[k];
    top = std::max(top, m[k]);
  }
  return top;
}

// 16-bit floats stay integers until the squares: the finite test is one
// compare on the exponent bits, |x| is a mask, and amax is an unsigned
// integer max (non-negative IEEE bit patterns order like their values).
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) ScanResult scan_half_avx2(const uint8_t* p, uint64_t count) {
  // A block is scanned again in the exact form when it holds a NaN or Inf,
  // or (bf16 has f32's range) when its squares could overflow f32
  // (|x| >= 2^63) or lose bits below f32's normal range (every |x| under
  // 2^-50). f16 squares always fit.
  constexpr uint16_t kBig = kBf16 ? 190u << 7 : 0x7C00u;  // bf16 2^63; f16 Inf
  constexpr uint16_t kTiny = kBf16 ? 77u << 7 : 0u;       // bf16 2^-50
  constexpr uint64_t kBlock = uint64_t{32} * 8192;        // 16-bit lane counters cannot wrap
  __m256d total[4];
  for (auto& t : total) t = _mm256_setzero_pd();
  ScanResult r;
  uint16_t top = 0;
  uint64_t i = 0;
  for (; i + 32 <= count; i = std::min<uint64_t>(count & ~uint64_t{31}, i + kBlock)) {
    const uint64_t n = std::min<uint64_t>(count & ~uint64_t{31}, i + kBlock) - i;
    __m256d s[4];
    for (auto& a : s) a = _mm256_setzero_pd();
    uint64_t bad = 0;
    uint16_t block_top = scan_half_block<kBf16, false>(p + i * 2, n, bad, s);
    if (block_top >= kBig || (block_top != 0 && block_top < kTiny)) {
      for (auto& a : s) a = _mm256_setzero_pd();
      bad = 0;
      block_top = scan_half_block<kBf16, true>(p + i * 2, n, bad, s);
    }
    r.non_finite += bad;
    top = std::max(top, block_top);
    for (size_t k = 0; k < 4; ++k) total[k] = _mm256_add_pd(total[k], s[k]);
  }
  r.sum_squares = hsum(_mm256_add_pd(_mm256_add_pd(total[0], total[1]), _mm256_add_pd(total[2], total[3])));
  r.amax = kBf16 ? bf16_to_f32(top) : f16_to_f32(top);
  scan_tail(p + i * 2, count - i, kBf16 ? HAL_DTYPE_BF16 : HAL_DTYPE_F16, r);
  return r;
}

}  // namespace

ScanResult scan_avx2(const void* data, uint64_t count, hal_dtype_t dtype) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (dtype == HAL_DTYPE_F32) return scan_f32_avx2(p, count);
  return dtype == HAL_DTYPE_BF16 ? scan_half_avx2<true>(p, count) : scan_half_avx2<false>(p, count);
}

}  // namespace sigma_cpu::detail
