// Byte-plane shuffle, XOR and checksum for the checkpoint engine. Plain
// loops the compiler vectorises; the element sizes that matter get their own
// instantiation so the inner loop has a constant stride.
#include <sigma/error.hpp>
#include <sigma/kernels.hpp>

#include <xxhash.h>

#include <cstring>

namespace sigma::kernels {
namespace {

template <uint32_t E>
void shuffle_fixed(const uint8_t* src, uint8_t* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < E; ++b) dst[b * n + i] = src[i * E + b];
}

template <uint32_t E>
void unshuffle_fixed(const uint8_t* src, uint8_t* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < E; ++b) dst[i * E + b] = src[b * n + i];
}

void check(const void* src, const void* dst, uint64_t count, uint32_t elem_size, const char* who) {
  if (elem_size == 0) throw Error(Code::invalid_argument, std::string(who) + ": element size 0");
  if (count > 0 && (src == nullptr || dst == nullptr)) throw Error(Code::invalid_argument, std::string(who) + ": NULL buffer");
}

}  // namespace

void shuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  check(src, dst, count, elem_size, "shuffle_bytes");
  if (count == 0) return;  // the buffers may be NULL then
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  switch (elem_size) {
    case 1: std::memcpy(d, s, count); return;
    case 2: return shuffle_fixed<2>(s, d, count);
    case 4: return shuffle_fixed<4>(s, d, count);
    case 8: return shuffle_fixed<8>(s, d, count);
    default:
      for (uint64_t i = 0; i < count; ++i)
        for (uint32_t b = 0; b < elem_size; ++b) d[b * count + i] = s[i * elem_size + b];
  }
}

void unshuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size) {
  check(src, dst, count, elem_size, "unshuffle_bytes");
  if (count == 0) return;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  switch (elem_size) {
    case 1: std::memcpy(d, s, count); return;
    case 2: return unshuffle_fixed<2>(s, d, count);
    case 4: return unshuffle_fixed<4>(s, d, count);
    case 8: return unshuffle_fixed<8>(s, d, count);
    default:
      for (uint64_t i = 0; i < count; ++i)
        for (uint32_t b = 0; b < elem_size; ++b) d[i * elem_size + b] = s[b * count + i];
  }
}

void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes) {
  if (bytes > 0 && (a == nullptr || b == nullptr || out == nullptr))
    throw Error(Code::invalid_argument, "xor_bytes: NULL buffer");
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
  if (bytes > 0 && data == nullptr) throw Error(Code::invalid_argument, "checksum: NULL data");
  return XXH3_64bits(bytes ? data : "", bytes);
}

}  // namespace sigma::kernels
