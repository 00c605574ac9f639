// Internal: the CPU kernels' C++ face inside the sigma_cpu_kernels library.
// c_api.cpp turns it into the C ABI of sigma/cpu_kernels.h; nothing here is
// seen outside the library.
#pragma once

#include <sigma/hal.h>

#include <cstdint>
#include <string>

namespace sigma_cpu {

// Thrown by a kernel that refuses its arguments; c_api.cpp returns `status`
// and keeps `message` for sigma_cpu_last_error().
struct Failure {
  hal_status_t status;
  std::string message;
};
[[noreturn]] inline void refuse(hal_status_t status, std::string message) {
  throw Failure{status, std::move(message)};
}

struct ScanResult {
  uint64_t non_finite = 0;
  double sum_squares = 0;
  double amax = 0;
};

enum class Isa { scalar, avx2 };
Isa active_isa();
void force_isa(Isa isa);
void reset_isa();

ScanResult grad_scan(const void* data, uint64_t count, hal_dtype_t dtype);
void shuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size);
void unshuffle_bytes(const void* src, void* dst, uint64_t count, uint32_t elem_size);
void shuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size);
void unshuffle_xor_bytes(const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size);
void xor_bytes(const void* a, const void* b, void* out, uint64_t bytes);
uint64_t checksum(const void* data, uint64_t bytes);
uint64_t checksum_parallel(const void* data, uint64_t bytes);
void moe_plan(const int32_t* expert_ids, uint64_t num_tokens, uint32_t top_k, uint32_t num_experts,
              int64_t* row_of, uint64_t* expert_offsets);
void moe_permute(const void* tokens, uint64_t num_tokens, uint64_t hidden, hal_dtype_t dtype,
                 const int64_t* row_of, uint32_t top_k, void* out);
void moe_unpermute(const void* expert_out, const int64_t* row_of, const float* weights, uint64_t num_tokens,
                   uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out);
void moe_unpermute_split(const void* a, const int64_t* row_of_a, const void* b, const int64_t* row_of_b,
                         const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                         hal_dtype_t dtype, void* out);

}  // namespace sigma_cpu
