// KernelEntries (sigma/hal.hpp): a plugin's HAL_EXT_KERNELS entries called
// in the form of the minor it declared. 1.3's entries take args structs;
// a 1.2 plugin's positional entries get the same fields, one by one.
#include <sigma/hal.hpp>

#include <cstddef>

namespace sigma::hal {
namespace {

// Whether the extension's struct_size reaches entry `offset` and the entry is set.
template <typename Ext, typename F>
F* present(const Ext* ext, F* Ext::*field, size_t offset) {
  if (ext == nullptr || ext->header.struct_size < offset + sizeof(F*)) return nullptr;
  return ext->*field;
}
#define SIGMA_PRESENT(ext, type, name) present(ext, &type::name, offsetof(type, name))

}  // namespace

KernelEntries::KernelEntries(const Plugin& plugin) : now_(plugin.kernels()), v1_2_(plugin.kernels_v1_2()) {}

bool KernelEntries::has(Entry entry) const {
  const auto now = [&](auto* f) { return f != nullptr; };
  switch (entry) {
    case Entry::grad_scan:
      return now(SIGMA_PRESENT(now_, hal_ext_kernels_t, grad_scan)) ||
             now(SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, grad_scan));
    case Entry::shuffle:
      return now(SIGMA_PRESENT(now_, hal_ext_kernels_t, shuffle)) ||
             now(SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, shuffle));
    case Entry::checksum:
      return now(SIGMA_PRESENT(now_, hal_ext_kernels_t, checksum)) ||
             now(SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, checksum));
    case Entry::moe_permute:
      return now(SIGMA_PRESENT(now_, hal_ext_kernels_t, moe_permute)) ||
             now(SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, moe_permute));
    case Entry::moe_unpermute:
      return now(SIGMA_PRESENT(now_, hal_ext_kernels_t, moe_unpermute)) ||
             now(SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, moe_unpermute));
  }
  return false;
}

hal_status_t KernelEntries::grad_scan(const hal_kernel_grad_scan_args_t& a) const {
  if (auto* f = SIGMA_PRESENT(now_, hal_ext_kernels_t, grad_scan)) return f(&a);
  if (auto* f = SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, grad_scan))
    return f(a.device, a.data, a.count, a.dtype, a.out);
  return HAL_ERR_NOT_SUPPORTED;
}

hal_status_t KernelEntries::shuffle(const hal_kernel_shuffle_args_t& a) const {
  if (auto* f = SIGMA_PRESENT(now_, hal_ext_kernels_t, shuffle)) return f(&a);
  if (auto* f = SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, shuffle))
    return f(a.device, a.src, a.base, a.dst, a.count, a.elem_size, a.inverse);
  return HAL_ERR_NOT_SUPPORTED;
}

hal_status_t KernelEntries::checksum(const hal_kernel_checksum_args_t& a) const {
  if (auto* f = SIGMA_PRESENT(now_, hal_ext_kernels_t, checksum)) return f(&a);
  if (auto* f = SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, checksum))
    return f(a.device, a.data, a.bytes, a.out);
  return HAL_ERR_NOT_SUPPORTED;
}

hal_status_t KernelEntries::moe_permute(const hal_kernel_moe_permute_args_t& a) const {
  if (auto* f = SIGMA_PRESENT(now_, hal_ext_kernels_t, moe_permute)) return f(&a);
  if (auto* f = SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, moe_permute))
    return f(a.device, a.tokens, a.num_tokens, a.row_bytes, a.row_of, a.top_k, a.out);
  return HAL_ERR_NOT_SUPPORTED;
}

hal_status_t KernelEntries::moe_unpermute(const hal_kernel_moe_unpermute_args_t& a) const {
  if (auto* f = SIGMA_PRESENT(now_, hal_ext_kernels_t, moe_unpermute)) return f(&a);
  if (auto* f = SIGMA_PRESENT(v1_2_, hal_ext_kernels_v1_2_t, moe_unpermute))
    return f(a.device, a.expert_out, a.row_of, a.weights, a.num_tokens, a.top_k, a.hidden, a.dtype, a.out);
  return HAL_ERR_NOT_SUPPORTED;
}

#undef SIGMA_PRESENT

}  // namespace sigma::hal
