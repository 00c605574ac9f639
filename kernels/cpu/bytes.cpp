// Byte-plane shuffle, XOR and checksum for the checkpoint engine. 2- and
// 4-byte elements go through the AVX2 kernels when the CPU has them; the
// rest, and the tails, are byte loops with a constant stride per size.
#include <sigma/hal_support.h>
#include "dispatch.hpp"

#include <xxhash.h>

#include <cstring>

namespace sigma_cpu {
namespace {

// Elements [from, n) one byte at a time, base XORed in when given; the
// inverse reads the planes and writes elements.
template <uint32_t E, bool kInverse>
void planes_fixed(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t from, uint64_t n,
                  uint32_t es) {
  const uint32_t e = E ? E : es;
  for (uint64_t i = from; i < n; ++i)
    for (uint32_t b = 0; b < e; ++b) {
      const uint8_t x = base ? base[i * e + b] : 0;
      if constexpr (kInverse)
        dst[i * e + b] = src[b * n + i] ^ x;
      else
        dst[b * n + i] = src[i * e + b] ^ x;
    }
}

void check(const void* src, const void* dst, uint64_t count, uint32_t elem_size, const char* who) {
  if (elem_size == 0) refuse(HAL_ERR_INVALID_ARGUMENT, std::string(who) + ": element size 0");
  if (count > 0 && (src == nullptr || dst == nullptr))
    refuse(HAL_ERR_INVALID_ARGUMENT, std::string(who) + ": NULL buffer");
}

template <bool kInverse>
void planes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size,
            const char* who) {
  check(src, dst, count, elem_size, who);
  if (count == 0) return;  // the buffers may be NULL then
  const auto* s = static_cast<const uint8_t*>(src);
  const auto* x = static_cast<const uint8_t*>(base);
  auto* d = static_cast<uint8_t*>(dst);
  if (elem_size == 1) {
    if (x)
      xor_bytes(s, x, d, count);
    else
      std::memcpy(d, s, count);
    return;
  }
  uint64_t done = 0;
  if (detail::isa() == Isa::avx2)
    done = kInverse ? detail::unshuffle_avx2(s, x, d, count, elem_size)
                    : detail::shuffle_avx2(s, x, d, count, elem_size);
  switch (elem_size) {
    case 2:
      return planes_fixed<2, kInverse>(s, x, d, done, count, 2);
    case 4:
      return planes_fixed<4, kInverse>(s, x, d, done, count, 4);
    case 8:
      return planes_fixed<8, kInverse>(s, x, d, done, count, 8);
    default:
      return planes_fixed<0, kInverse>(s, x, d, done, count, elem_size);
  }
}

}  // namespace

void shuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  planes<false>(src, nullptr, dst, count, elem_size, "shuffle_bytes");
}

void unshuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  planes<true>(src, nullptr, dst, count, elem_size, "unshuffle_bytes");
}

void shuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size) {
  if (count > 0 && base == nullptr) refuse(HAL_ERR_INVALID_ARGUMENT, "shuffle_xor_bytes: NULL base");
  planes<false>(src, base, dst, count, elem_size, "shuffle_xor_bytes");
}

void unshuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size) {
  if (count > 0 && base == nullptr) refuse(HAL_ERR_INVALID_ARGUMENT, "unshuffle_xor_bytes: NULL base");
  planes<true>(src, base, dst, count, elem_size, "unshuffle_xor_bytes");
}

void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes) {
  if (bytes > 0 && (a == nullptr || b == nullptr || out == nullptr))
    refuse(HAL_ERR_INVALID_ARGUMENT, "xor_bytes: NULL buffer");
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  auto* o = static_cast<uint8_t*>(out);
  uint64_t i = 0;
  // Eight bytes at a time (memcpy keeps it legal at any alignment).
  for (; i + 8 <= bytes; i += 8) {
    uint64_t u, v;
    std::memcpy(&u, x + i, 8);
    std::memcpy(&v, y + i, 8);
    u ^= v;
    std::memcpy(o + i, &u, 8);
  }
  for (; i < bytes; ++i) o[i] = x[i] ^ y[i];
}

uint64_t checksum(const void* data, uint64_t bytes) {
  if (bytes > 0 && data == nullptr) refuse(HAL_ERR_INVALID_ARGUMENT, "checksum: NULL data");
  return XXH3_64bits(bytes ? data : "", bytes);
}

uint64_t checksum_parallel(const void* data, uint64_t bytes) {
  if (bytes > 0 && data == nullptr) refuse(HAL_ERR_INVALID_ARGUMENT, "checksum_parallel: NULL data");
  const auto* p = static_cast<const uint8_t*>(data);
  const uint64_t words = bytes / 8;
  // Four independent sums: the adds commute, so the result is the same.
  uint64_t s[4] = {0, 0, 0, 0};
  uint64_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + (i + k) * 8, 8);  // little-endian on every target we build for
      s[k] += hal_h64_word(w, i + k);
    }
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    s[0] += hal_h64_word(w, i);
  }
  if (bytes % 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + words * 8, bytes % 8);
    s[0] += hal_h64_word(w, words);
  }
  return hal_h64_finish(s[0] + s[1] + s[2] + s[3], bytes);
}

}  // namespace sigma_cpu
