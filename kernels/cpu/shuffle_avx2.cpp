// AVX2 byte-plane shuffle for 2- and 4-byte elements, with an optional XOR
// against a base buffer fused in (XOR commutes with a byte permutation, so
// shuffle(src ^ base) == shuffle(src) ^ shuffle(base)). Bytes are grouped
// inside each 16-byte lane with one pshufb, then whole 8- or 16-byte runs are
// moved between registers: 32 elements per step, tails left to the caller.
#include "dispatch.hpp"

#include <immintrin.h>

#include <type_traits>

namespace sigma_cpu::detail {
namespace {

// Within a 16-byte lane: 4-byte elements -> [b0 x4][b1 x4][b2 x4][b3 x4]
// (a 4x4 byte transpose, its own inverse); 2-byte -> [b0 x8][b1 x8].
#define SIGMA_LANES(...) _mm256_setr_epi8(__VA_ARGS__, __VA_ARGS__)
#define SIGMA_GROUP4 SIGMA_LANES(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
#define SIGMA_GROUP2 SIGMA_LANES(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)
#define SIGMA_UNGROUP2 SIGMA_LANES(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15)

// base + offset, or NULL without a base (no arithmetic on a null pointer).
inline const uint8_t* at(const uint8_t* base, uint64_t offset) { return base ? base + offset : nullptr; }

template <bool kXor>
__attribute__((target("avx2"), always_inline)) inline __m256i load(const uint8_t* p, const uint8_t* base) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (!kXor) return x;
  return _mm256_xor_si256(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)));
}

template <bool kXor, bool kStream = false>
__attribute__((target("avx2"), always_inline)) inline void store(uint8_t* p, __m256i v, const uint8_t* base) {
  if constexpr (kXor) v = _mm256_xor_si256(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)));
  // Non-temporal for outputs far beyond the caches: no read of each
  // destination line before it is written (needs 32-byte alignment).
  if constexpr (kStream)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}

template <bool kXor, bool kStream>
__attribute__((target("avx2"))) uint64_t shuffle4(const uint8_t* s, const uint8_t* base, uint8_t* d,
                                                  uint64_t n) {
  const __m256i group = SIGMA_GROUP4, spread = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a[4];
    for (size_t k = 0; k < 4; ++k) {
      // After this, qword q of a[k] holds byte q of elements i+8k .. i+8k+7.
      a[k] = _mm256_permutevar8x32_epi32(
          _mm256_shuffle_epi8(load<kXor>(s + 4 * i + 32 * k, at(base, 4 * i + 32 * k)), group), spread);
    }
    const __m256i t0 = _mm256_unpacklo_epi64(a[0], a[1]), t1 = _mm256_unpackhi_epi64(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi64(a[2], a[3]), t3 = _mm256_unpackhi_epi64(a[2], a[3]);
    store<false, kStream>(d + i, _mm256_permute2x128_si256(t0, t2, 0x20), nullptr);
    store<false, kStream>(d + n + i, _mm256_permute2x128_si256(t1, t3, 0x20), nullptr);
    store<false, kStream>(d + 2 * n + i, _mm256_permute2x128_si256(t0, t2, 0x31), nullptr);
    store<false, kStream>(d + 3 * n + i, _mm256_permute2x128_si256(t1, t3, 0x31), nullptr);
  }
  return i;
}

template <bool kXor, bool kStream>
__attribute__((target("avx2"))) uint64_t unshuffle4(const uint8_t* s, const uint8_t* base, uint8_t* d,
                                                    uint64_t n) {
  const __m256i group = SIGMA_GROUP4, gather = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i p0 = load<false>(s + i, nullptr), p1 = load<false>(s + n + i, nullptr);
    const __m256i p2 = load<false>(s + 2 * n + i, nullptr), p3 = load<false>(s + 3 * n + i, nullptr);
    const __m256i t0 = _mm256_permute2x128_si256(p0, p2, 0x20), t2 = _mm256_permute2x128_si256(p0, p2, 0x31);
    const __m256i t1 = _mm256_permute2x128_si256(p1, p3, 0x20), t3 = _mm256_permute2x128_si256(p1, p3, 0x31);
    const __m256i a[4] = {_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1),
                          _mm256_unpacklo_epi64(t2, t3), _mm256_unpackhi_epi64(t2, t3)};
    for (size_t k = 0; k < 4; ++k) {
      store<kXor, kStream>(d + 4 * i + 32 * k,
                           _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(a[k], gather), group),
                           at(base, 4 * i + 32 * k));
    }
  }
  return i;
}

template <bool kXor, bool kStream>
__attribute__((target("avx2"))) uint64_t shuffle2(const uint8_t* s, const uint8_t* base, uint8_t* d,
                                                  uint64_t n) {
  const __m256i group = SIGMA_GROUP2;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // After the permute, the low half of a holds byte 0 of its 16 elements.
    const __m256i a0 =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(load<kXor>(s + 2 * i, at(base, 2 * i)), group), 0xD8);
    const __m256i a1 = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(load<kXor>(s + 2 * i + 32, at(base, 2 * i + 32)), group), 0xD8);
    store<false, kStream>(d + i, _mm256_permute2x128_si256(a0, a1, 0x20), nullptr);
    store<false, kStream>(d + n + i, _mm256_permute2x128_si256(a0, a1, 0x31), nullptr);
  }
  return i;
}

template <bool kXor, bool kStream>
__attribute__((target("avx2"))) uint64_t unshuffle2(const uint8_t* s, const uint8_t* base, uint8_t* d,
                                                    uint64_t n) {
  const __m256i ungroup = SIGMA_UNGROUP2;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i p0 = load<false>(s + i, nullptr), p1 = load<false>(s + n + i, nullptr);
    const __m256i a0 = _mm256_permute2x128_si256(p0, p1, 0x20), a1 = _mm256_permute2x128_si256(p0, p1, 0x31);
    store<kXor, kStream>(d + 2 * i, _mm256_shuffle_epi8(_mm256_permute4x64_epi64(a0, 0xD8), ungroup),
                         at(base, 2 * i));
    store<kXor, kStream>(d + 2 * i + 32, _mm256_shuffle_epi8(_mm256_permute4x64_epi64(a1, 0xD8), ungroup),
                         at(base, 2 * i + 32));
  }
  return i;
}

template <bool kStream>
uint64_t shuffle_any(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t count,
                     uint32_t elem_size) {
  if (elem_size == 4)
    return base ? shuffle4<true, kStream>(src, base, dst, count)
                : shuffle4<false, kStream>(src, base, dst, count);
  if (elem_size == 2)
    return base ? shuffle2<true, kStream>(src, base, dst, count)
                : shuffle2<false, kStream>(src, base, dst, count);
  return 0;
}

}  // namespace

uint64_t shuffle_avx2(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t count,
                      uint32_t elem_size) {
  // Every plane starts 32-byte aligned when dst is and count is a multiple
  // of 32; then large outputs are streamed past the caches.
  const bool stream = reinterpret_cast<uintptr_t>(dst) % 32 == 0 && count % 32 == 0 &&
                      count * elem_size >= (uint64_t{8} << 20);
  if (!stream) return shuffle_any<false>(src, base, dst, count, elem_size);
  const uint64_t done = shuffle_any<true>(src, base, dst, count, elem_size);
  _mm_sfence();
  return done;
}

uint64_t unshuffle_avx2(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t count,
                        uint32_t elem_size) {
  const bool stream = reinterpret_cast<uintptr_t>(dst) % 32 == 0 && count * elem_size >= (uint64_t{8} << 20);
  auto run = [&](auto streaming) -> uint64_t {
    constexpr bool kS = decltype(streaming)::value;
    if (elem_size == 4)
      return base ? unshuffle4<true, kS>(src, base, dst, count)
                  : unshuffle4<false, kS>(src, base, dst, count);
    if (elem_size == 2)
      return base ? unshuffle2<true, kS>(src, base, dst, count)
                  : unshuffle2<false, kS>(src, base, dst, count);
    return 0;
  };
  if (!stream) return run(std::false_type{});
  const uint64_t done = run(std::true_type{});
  _mm_sfence();
  return done;
}

}  // namespace sigma_cpu::detail
