// The sim vendor's HAL_EXT_KERNELS: libsigma's own CPU kernels (the static
// library of sigma/cpu_kernels.h, host memory) run on the plugin's private mappings of
// opaque device buffers (opaque=1), or on the buffers themselves when the
// memory is the host's, so results are bit-identical to the host's and the
// host never touches an opaque pointer.
#include "opaque.hpp"
#include "sim.hpp"

#include <sigma/cpu_kernels.h>
#include <sigma/hal_support.h>

#include <algorithm>
#include <string>

namespace sim_vendor {
namespace {

// Runs `body` with device pointers translated; a kernel's refusal or a
// pointer outside device memory becomes the entry's status.
template <typename F>
hal_status_t run(uint32_t device, const char* who, F&& body) {
  if (hal_status_t st = check_alive(device); st != HAL_OK) return st;
  if (!opaque::kernels())
    return fail(HAL_ERR_NOT_SUPPORTED, std::string("sim: ") + who + ": declined (kernels=0)");
  return body();
}

// A kernel's status, its message kept for get_last_error.
hal_status_t kernel(hal_status_t st, const char* who) {
  return st == HAL_OK ? st : fail(st, std::string("sim: ") + who + ": " + sigma_cpu_last_error());
}

// The private address of `bytes` device bytes at `p`; nullptr is a NULL
// that stays NULL (an empty or absent buffer).
template <typename T>
T* priv(T* p, uint64_t bytes, bool& ok) {
  if (p == nullptr || !opaque::enabled()) return p;
  auto* q = static_cast<T*>(opaque::to_private(p, bytes));
  ok = ok && q != nullptr;
  return q;
}

hal_status_t outside(const char* who) {
  return fail(HAL_ERR_INVALID_ARGUMENT, std::string("sim: ") + who + ": a buffer is not device memory");
}

hal_status_t grad_scan(uint32_t device, const void* data, uint64_t count, hal_dtype_t dtype,
                       hal_kernel_scan_result_t* out) {
  return run(device, "grad_scan", [&]() -> hal_status_t {
    if (out == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: grad_scan: result is NULL");
    bool ok = true;
    const void* p = priv(data, count * std::max<uint64_t>(hal_dtype_size(dtype), 1), ok);
    if (!ok) return outside("grad_scan");
    return kernel(sigma_cpu_grad_scan(p, count, dtype, out), "grad_scan");
  });
}

hal_status_t shuffle(uint32_t device, const void* src, const void* base, void* dst, uint64_t count,
                     uint32_t elem_size, uint32_t inverse) {
  return run(device, "shuffle", [&]() -> hal_status_t {
    const uint64_t bytes = count * elem_size;
    bool ok = true;
    const void* s = priv(src, bytes, ok);
    const void* b = priv(base, bytes, ok);
    void* d = priv(dst, bytes, ok);
    if (!ok) return outside("shuffle");
    return kernel(sigma_cpu_shuffle(s, b, d, count, elem_size, inverse != 0), "shuffle");
  });
}

hal_status_t checksum(uint32_t device, const void* data, uint64_t bytes, uint64_t* out) {
  return run(device, "checksum", [&]() -> hal_status_t {
    if (out == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: checksum: result is NULL");
    bool ok = true;
    const void* p = priv(data, bytes, ok);
    if (!ok) return outside("checksum");
    return kernel(sigma_cpu_h64(p, bytes, out), "checksum");
  });
}

hal_status_t moe_permute(uint32_t device, const void* tokens, uint64_t num_tokens, uint64_t row_bytes,
                         const int64_t* row_of, uint32_t top_k, void* out) {
  return run(device, "moe_permute", [&]() -> hal_status_t {
    bool ok = true;
    const void* t = priv(tokens, num_tokens * row_bytes, ok);
    const int64_t* r = priv(row_of, num_tokens * top_k * sizeof(int64_t), ok);
    if (!ok) return outside("moe_permute");
    // Rows of bytes: the permutation of u8 rows of row_bytes elements.
    // `out`'s extent is its allocation's: the largest row written is checked there.
    int64_t last = -1;
    for (uint64_t i = 0; i < num_tokens * top_k; ++i) last = std::max(last, r[i]);
    void* o = priv(out, static_cast<uint64_t>(last + 1) * row_bytes, ok);
    if (!ok) return outside("moe_permute");
    return kernel(sigma_cpu_moe_permute(t, num_tokens, row_bytes, HAL_DTYPE_U8, r, top_k, o), "moe_permute");
  });
}

hal_status_t moe_unpermute(uint32_t device, const void* expert_out, const int64_t* row_of,
                           const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                           hal_dtype_t dtype, void* out) {
  return run(device, "moe_unpermute", [&]() -> hal_status_t {
    const uint64_t row = hidden * hal_dtype_size(dtype), choices = num_tokens * top_k;
    bool ok = true;
    const int64_t* r = priv(row_of, choices * sizeof(int64_t), ok);
    const float* w = priv(weights, choices * sizeof(float), ok);
    void* o = priv(out, num_tokens * row, ok);
    if (!ok) return outside("moe_unpermute");
    int64_t last = -1;
    for (uint64_t i = 0; i < choices; ++i) last = std::max(last, r[i]);
    const void* e = priv(expert_out, static_cast<uint64_t>(last + 1) * row, ok);
    if (!ok) return outside("moe_unpermute");
    const sigma_cpu_unpermute_args_t a{e, r, nullptr, nullptr, w, num_tokens, top_k, dtype, hidden, o};
    return kernel(sigma_cpu_moe_unpermute(&a), "moe_unpermute");
  });
}

// The entries (ABI 1.3): each args struct checked, then the work above.
hal_status_t bad_args(const char* who) {
  return fail(HAL_ERR_INVALID_ARGUMENT, std::string("sim: ") + who + ": args NULL or smaller than ABI 1.3's");
}

hal_status_t grad_scan_entry(const hal_kernel_grad_scan_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_GRAD_SCAN_ARGS_V1_3_SIZE) return bad_args("grad_scan");
  return grad_scan(a->device, a->data, a->count, a->dtype, a->out);
}

hal_status_t shuffle_entry(const hal_kernel_shuffle_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_SHUFFLE_ARGS_V1_3_SIZE) return bad_args("shuffle");
  return shuffle(a->device, a->src, a->base, a->dst, a->count, a->elem_size, a->inverse);
}

hal_status_t checksum_entry(const hal_kernel_checksum_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_CHECKSUM_ARGS_V1_3_SIZE) return bad_args("checksum");
  return checksum(a->device, a->data, a->bytes, a->out);
}

hal_status_t moe_permute_entry(const hal_kernel_moe_permute_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_MOE_PERMUTE_ARGS_V1_3_SIZE) return bad_args("moe_permute");
  return moe_permute(a->device, a->tokens, a->num_tokens, a->row_bytes, a->row_of, a->top_k, a->out);
}

hal_status_t moe_unpermute_entry(const hal_kernel_moe_unpermute_args_t* a) {
  if (a == nullptr || a->struct_size < HAL_KERNEL_MOE_UNPERMUTE_ARGS_V1_3_SIZE)
    return bad_args("moe_unpermute");
  return moe_unpermute(a->device, a->expert_out, a->row_of, a->weights, a->num_tokens, a->top_k, a->hidden,
                       a->dtype, a->out);
}

}  // namespace

const hal_ext_kernels_t k_kernels_ext = {
    .header = {.struct_size = sizeof(hal_ext_kernels_t),
               .type = HAL_EXT_KERNELS,
               .reserved = 0,
               .next = nullptr},
    .grad_scan = grad_scan_entry,
    .shuffle = shuffle_entry,
    .checksum = checksum_entry,
    .moe_permute = moe_permute_entry,
    .moe_unpermute = moe_unpermute_entry,
};

}  // namespace sim_vendor
