// Host reference for the collective matrix: typed host arrays, the inputs
// each rank contributes, and what every rank must receive.
#pragma once

#include <sigma/hal.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::conformance {

// An array of `dtype` elements in host memory, read and written as doubles.
class HostArray {
 public:
  HostArray(hal_dtype_t dtype, uint64_t n);
  void set(uint64_t i, double v);
  double get(uint64_t i) const;
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  uint64_t size() const { return n_; }
  uint64_t bytes() const { return bytes_.size(); }
  hal_dtype_t dtype() const { return dtype_; }

 private:
  hal_dtype_t dtype_;
  uint64_t n_;
  uint64_t esize_;
  std::vector<uint8_t> bytes_;
};

uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);

// The value rank `rank` contributes at element `i` (exact in every dtype).
// Reducing ops use small values so sums and products stay exact.
double input_value(hal_dtype_t dtype, bool reducing, hal_reduce_op_t red, uint32_t rank, uint64_t i);

// The reduction of the world's inputs at element i, as the dtype computes it.
double reduced_value(hal_dtype_t dtype, hal_reduce_op_t red, uint32_t world, uint64_t i);

// Whether `got` matches `want` for the dtype (exact for integers, a relative
// tolerance for floating point that allows a different summation order).
bool close_enough(hal_dtype_t dtype, double got, double want);

}  // namespace sigma::conformance
