// Element-wise reductions for every HAL dtype, in the shape Gloo's options
// take: out[i] = op(a[i], b[i]) for n elements (out may alias a or b).
#pragma once

#include <sigma/hal_support.h>

#include <cstddef>
#include <functional>

namespace cpu_vendor {

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The function for (dtype, op), or nullptr for a pair ABI 1.0 does not
// define. AVG reduces as SUM; divide_by() finishes it.
ReduceFn reduce_function(hal_dtype_t dtype, hal_reduce_op_t op);

// buf[i] /= divisor for n elements (integers truncate toward zero; u8 divides
// its wrapped sum).
void divide_by(hal_dtype_t dtype, void* buf, size_t n, uint32_t divisor);

// Reduces `count` blocks of n elements laid out one after another in `src`
// into `out`: the local half of a reduce-scatter.
void reduce_blocks(hal_dtype_t dtype, hal_reduce_op_t op, void* out, const void* src, size_t n, size_t count);

}  // namespace cpu_vendor
