// MoE permute / unpermute on the CPU: a counting sort for the plan (stable,
// so the same on every run), row copies for the gather, and one fused
// weighted sum per output row for the scatter-add, vectorised for AVX2 by
// compiling the same loop body in a target-specific clone.
#include "convert.hpp"
#include "dispatch.hpp"

#include <sigma/hal_support.h>

#include <immintrin.h>

#include <cstring>
#include <string>
#include <vector>

namespace sigma_cpu {
namespace {

inline float load(const uint8_t* p, hal_dtype_t dt) { return detail::load_one(p, dt); }

inline void store(uint8_t* p, float f, hal_dtype_t dt) {
  if (dt == HAL_DTYPE_F32) {
    std::memcpy(p, &f, 4);
  } else if (dt == HAL_DTYPE_F16) {
    const uint16_t h = detail::f32_to_f16(f);
    std::memcpy(p, &h, 2);
  } else {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    // Round to nearest even; a NaN stays a (quiet) NaN.
    const uint16_t h = (x & 0x7FFFFFFFu) > 0x7F800000u
                           ? static_cast<uint16_t>((x >> 16) | 0x40u)
                           : static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
    std::memcpy(p, &h, 2);
  }
}

// out[t] = sum_k w_k * rows_k, for one token, in f32: the body both the
// portable and the AVX2 clone compile.
template <hal_dtype_t kDt>
__attribute__((always_inline)) inline void weighted_row(const uint8_t* const* rows, const float* w,
                                                        uint32_t n, uint64_t hidden, uint8_t* out) {
  constexpr size_t es = kDt == HAL_DTYPE_F32 ? 4 : 2;
  constexpr uint64_t kTile = 256;  // an f32 accumulator tile that stays in registers / L1
  float acc[kTile];
  for (uint64_t j0 = 0; j0 < hidden; j0 += kTile) {
    const uint64_t m = hidden - j0 < kTile ? hidden - j0 : kTile;
    for (uint64_t j = 0; j < m; ++j) acc[j] = 0.0f;
    for (uint32_t k = 0; k < n; ++k) {
      const uint8_t* r = rows[k] + j0 * es;
      const float wk = w[k];
      for (uint64_t j = 0; j < m; ++j) acc[j] += wk * load(r + j * es, kDt);
    }
    for (uint64_t j = 0; j < m; ++j) store(out + (j0 + j) * es, acc[j], kDt);
  }
}

// Where the unpermute's rows are: row_of[i] of `a`, else (b_row_of set
// and row_of[i] < 0) b_row_of[i] of `b`.
struct Sources {
  const uint8_t* a;
  const int64_t* row_of;
  const uint8_t* b = nullptr;
  const int64_t* b_row_of = nullptr;
};

template <hal_dtype_t kDt>
__attribute__((always_inline)) inline void unpermute_rows(const Sources& src, const float* weights,
                                                          uint64_t tokens, uint32_t k, uint64_t hidden,
                                                          uint8_t* out) {
  constexpr size_t es = kDt == HAL_DTYPE_F32 ? 4 : 2;
  std::vector<const uint8_t*> rows(k);
  std::vector<float> w(k);
  for (uint64_t t = 0; t < tokens; ++t) {
    uint32_t n = 0;
    for (uint32_t c = 0; c < k; ++c) {
      const int64_t r = src.row_of[t * k + c];
      const int64_t rb = r < 0 && src.b_row_of ? src.b_row_of[t * k + c] : -1;
      if (r < 0 && rb < 0) continue;
      rows[n] = r >= 0 ? src.a + static_cast<uint64_t>(r) * hidden * es
                       : src.b + static_cast<uint64_t>(rb) * hidden * es;
      w[n++] = weights[t * k + c];
    }
    weighted_row<kDt>(rows.data(), w.data(), n, hidden, out + t * hidden * es);
  }
}

// The same loops, compiled once for any x86-64 and once for AVX2 + F16C.
template <hal_dtype_t kDt>
void unpermute_generic(const Sources& src, const float* weights, uint64_t tokens, uint32_t k, uint64_t hidden,
                       uint8_t* out) {
  unpermute_rows<kDt>(src, weights, tokens, k, hidden, out);
}

template <hal_dtype_t kDt>
__attribute__((target("avx2,fma,f16c"))) void unpermute_avx2(const Sources& src, const float* weights,
                                                             uint64_t tokens, uint32_t k, uint64_t hidden,
                                                             uint8_t* out) {
  unpermute_rows<kDt>(src, weights, tokens, k, hidden, out);
}

void unpermute(const Sources& src, const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
               hal_dtype_t dtype, void* out, const char* what) {
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16)
    refuse(HAL_ERR_INVALID_ARGUMENT,
           std::string(what) + ": dtype " + std::to_string(dtype) + " is not f32, f16 or bf16");
  if (num_tokens * hidden == 0) return;
  if (out == nullptr || (top_k > 0 && (src.a == nullptr || src.row_of == nullptr || weights == nullptr)))
    refuse(HAL_ERR_INVALID_ARGUMENT, std::string(what) + ": NULL buffer");
  auto* dst = static_cast<uint8_t*>(out);
  const bool avx2 = detail::isa() == Isa::avx2;
  switch (dtype) {
    case HAL_DTYPE_F32:
      return avx2 ? unpermute_avx2<HAL_DTYPE_F32>(src, weights, num_tokens, top_k, hidden, dst)
                  : unpermute_generic<HAL_DTYPE_F32>(src, weights, num_tokens, top_k, hidden, dst);
    case HAL_DTYPE_F16:
      return avx2 ? unpermute_avx2<HAL_DTYPE_F16>(src, weights, num_tokens, top_k, hidden, dst)
                  : unpermute_generic<HAL_DTYPE_F16>(src, weights, num_tokens, top_k, hidden, dst);
    default:
      return avx2 ? unpermute_avx2<HAL_DTYPE_BF16>(src, weights, num_tokens, top_k, hidden, dst)
                  : unpermute_generic<HAL_DTYPE_BF16>(src, weights, num_tokens, top_k, hidden, dst);
  }
}

// Rows bound for a buffer far larger than the caches: non-temporal stores
// skip reading each destination line before writing it (a third of the
// traffic of a plain copy). 32-byte stores where the destination rows are
// 32-byte aligned, else 16-byte ones (a vector's storage from malloc is
// 16-byte aligned); both fill whole lines in the write-combining buffers.
template <int kWidth>
__attribute__((target("avx2"))) void permute_stream(const uint8_t* src, uint8_t* dst, uint64_t tokens,
                                                    uint32_t k, const int64_t* row_of, uint64_t row) {
  for (uint64_t t = 0; t < tokens; ++t)
    for (uint32_t c = 0; c < k; ++c) {
      const int64_t r = row_of[t * k + c];
      if (r < 0) continue;
      const uint8_t* from = src + t * row;
      uint8_t* to = dst + static_cast<uint64_t>(r) * row;
      for (uint64_t i = 0; i < row; i += kWidth) {
        if constexpr (kWidth == 32)
          _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i)));
        else
          _mm_stream_si128(reinterpret_cast<__m128i*>(to + i),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i)));
      }
    }
  _mm_sfence();  // the streamed rows are visible before the caller reads them
}

}  // namespace

void moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k, uint32_t num_experts,
              int64_t* row_of, uint64_t* expert_offsets) {
  if (expert_offsets == nullptr || (num_tokens * top_k > 0 && (expert_ids == nullptr || row_of == nullptr)))
    refuse(HAL_ERR_INVALID_ARGUMENT, "moe_plan: NULL buffer");
  std::vector<uint64_t> count(num_experts + 1, 0);
  const uint64_t n = num_tokens * top_k;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t e = expert_ids[i];
    if (e < -1 || e >= static_cast<int64_t>(num_experts))
      refuse(HAL_ERR_INVALID_ARGUMENT, "moe_plan: token " + std::to_string(i / top_k) + " choice " +
                                           std::to_string(i % top_k) + " names expert " + std::to_string(e) +
                                           " of " + std::to_string(num_experts));
    if (e >= 0) ++count[static_cast<uint32_t>(e) + 1];
  }
  for (uint32_t e = 0; e < num_experts; ++e) count[e + 1] += count[e];
  for (uint32_t e = 0; e <= num_experts; ++e) expert_offsets[e] = count[e];
  // count[e] is now expert e's next free row.
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t e = expert_ids[i];
    row_of[i] = e < 0 ? -1 : static_cast<int64_t>(count[static_cast<uint32_t>(e)]++);
  }
}

void moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden, hal_dtype_t dtype,
                 const int64_t* row_of, uint32_t top_k, void* out) {
  const uint64_t es = hal_dtype_size(dtype);
  if (es == 0) refuse(HAL_ERR_INVALID_ARGUMENT, "moe_permute: dtype " + std::to_string(dtype));
  if (num_tokens * top_k * hidden > 0 && (tokens == nullptr || row_of == nullptr || out == nullptr))
    refuse(HAL_ERR_INVALID_ARGUMENT, "moe_permute: NULL buffer");
  const auto* src = static_cast<const uint8_t*>(tokens);
  auto* dst = static_cast<uint8_t*>(out);
  const uint64_t row = hidden * es;
  const auto at = reinterpret_cast<uintptr_t>(dst);
  if (detail::isa() == Isa::avx2 && num_tokens * top_k * row >= (uint64_t{8} << 20)) {
    if (row % 32 == 0 && at % 32 == 0) return permute_stream<32>(src, dst, num_tokens, top_k, row_of, row);
    if (row % 16 == 0 && at % 16 == 0) return permute_stream<16>(src, dst, num_tokens, top_k, row_of, row);
  }
  for (uint64_t t = 0; t < num_tokens; ++t)
    for (uint32_t k = 0; k < top_k; ++k) {
      const int64_t r = row_of[t * top_k + k];
      if (r >= 0) std::memcpy(dst + static_cast<uint64_t>(r) * row, src + t * row, row);
    }
}

void moe_unpermute(const void* expert_out, const int64_t* row_of, const float* weights, uint64_t num_tokens,
                   uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out) {
  unpermute({static_cast<const uint8_t*>(expert_out), row_of}, weights, num_tokens, top_k, hidden, dtype, out,
            "moe_unpermute");
}

void moe_unpermute_split(const void* a, const int64_t* row_of_a, const void* b, const int64_t* row_of_b,
                         const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                         hal_dtype_t dtype, void* out) {
  if (num_tokens * top_k * hidden > 0 && (b == nullptr || row_of_b == nullptr))
    refuse(HAL_ERR_INVALID_ARGUMENT, "moe_unpermute_split: NULL buffer");
  unpermute({static_cast<const uint8_t*>(a), row_of_a, static_cast<const uint8_t*>(b), row_of_b}, weights,
            num_tokens, top_k, hidden, dtype, out, "moe_unpermute_split");
}

}  // namespace sigma_cpu
