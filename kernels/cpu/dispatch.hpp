// Internal: the run-time choice between the scalar and the AVX2 kernels.
#pragma once

#include "cpu.hpp"

#include <atomic>
#include <cstdint>

namespace sigma_cpu::detail {

extern std::atomic<int> g_isa;  // Isa, or -1 before the first use
bool cpu_has_avx2();
inline Isa isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(cpu_has_avx2() ? Isa::avx2 : Isa::scalar);
    g_isa.store(v, std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

ScanResult scan_scalar(const void* data, uint64_t count, hal_dtype_t dtype);
ScanResult scan_avx2(const void* data, uint64_t count, hal_dtype_t dtype);

// Vector byte-plane (un)shuffle of 2- or 4-byte elements, `base` XORed in
// (on the element-order side) unless NULL. Returns how many leading
// elements were done (a multiple of 32; 0 for other sizes); the caller
// does the rest with the same plane stride `count`.
uint64_t shuffle_avx2(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t count,
                      uint32_t elem_size);
uint64_t unshuffle_avx2(const uint8_t* src, const uint8_t* base, uint8_t* dst, uint64_t count,
                        uint32_t elem_size);

}  // namespace sigma_cpu::detail
