// The kernels on a buffer wherever it lives (sigma/kernels.hpp, Place): the
// HAL says whether the host may read the memory; device memory goes to the
// plugin's HAL_EXT_KERNELS entry, or through host staging when it has none.
#include <sigma/error.hpp>
#include <sigma/hal.hpp>
#include <sigma/kernels.hpp>

#include <algorithm>
#include <vector>

namespace sigma::kernels {
namespace {

// Staging works in pieces of this size, so a large buffer never needs a
// host copy of its whole size where the kernel allows it (the scan).
constexpr uint64_t kStagePiece = uint64_t{64} << 20;

bool on_host(const Place& w) { return w.plugin == nullptr || w.plugin->host_addressable(w.device); }

// The plugin's kernel entries, in the form of the minor it declared.
hal::KernelEntries entries(const Place& w) { return hal::KernelEntries(*w.plugin); }

// An entry's args, struct_size set and the rest zero.
template <typename Args>
Args args_for(const Place& w) {
  Args a{};
  a.struct_size = sizeof a;
  a.device = w.device;
  return a;
}

void to_host(const Place& w, void* dst, const void* src, uint64_t bytes, const char* who) {
  if (bytes == 0) return;
  w.plugin->check(w.plugin->api().device->memcpy(w.device, dst, src, bytes, HAL_COPY_DEVICE_TO_HOST, nullptr),
                  who);
}

void to_device(const Place& w, void* dst, const void* src, uint64_t bytes, const char* who) {
  if (bytes == 0) return;
  w.plugin->check(w.plugin->api().device->memcpy(w.device, dst, src, bytes, HAL_COPY_HOST_TO_DEVICE, nullptr),
                  who);
}

// Calls an entry; false when it declines (NOT_SUPPORTED: this buffer or
// dtype is not one it takes), which the caller answers by staging.
bool ran(const Place& w, hal_status_t st, const char* entry) {
  if (st == HAL_ERR_NOT_SUPPORTED) return false;
  w.plugin->check(st, entry);
  return true;
}

std::vector<uint8_t> staged(const Place& w, const void* src, uint64_t bytes, const char* who) {
  std::vector<uint8_t> h(bytes);
  to_host(w, h.data(), src, bytes, who);
  return h;
}

}  // namespace

ScanResult grad_scan(const Place& w, const void* data, uint64_t count, hal_dtype_t dtype) {
  if (on_host(w)) return grad_scan(data, count, dtype);
  if (const auto k = entries(w); k.has(hal::KernelEntries::Entry::grad_scan)) {
    hal_kernel_scan_result_t r{};
    auto a = args_for<hal_kernel_grad_scan_args_t>(w);
    a.data = data;
    a.count = count;
    a.dtype = dtype;
    a.out = &r;
    if (ran(w, k.grad_scan(a), "hal_ext_kernels_t.grad_scan")) return {r.non_finite, r.sum_squares, r.amax};
  }
  const uint64_t es = hal::dtype_size(dtype);
  if (es == 0 || es > 4) return grad_scan(nullptr, 0, dtype);  // throws: not a float dtype
  ScanResult all;
  std::vector<uint8_t> piece;
  const uint64_t per = kStagePiece / es;
  for (uint64_t at = 0; at < count; at += per) {
    const uint64_t n = std::min(per, count - at);
    piece.resize(n * es);
    to_host(w, piece.data(), static_cast<const uint8_t*>(data) + at * es, n * es,
            "memcpy (grad_scan staging)");
    const ScanResult r = grad_scan(piece.data(), n, dtype);
    all.non_finite += r.non_finite;
    all.sum_squares += r.sum_squares;
    all.amax = std::max(all.amax, r.amax);
  }
  return all;
}

uint64_t checksum_parallel(const Place& w, const void* data, uint64_t bytes) {
  if (on_host(w)) return checksum_parallel(data, bytes);
  if (const auto k = entries(w); k.has(hal::KernelEntries::Entry::checksum)) {
    uint64_t out = 0;
    auto a = args_for<hal_kernel_checksum_args_t>(w);
    a.data = data;
    a.bytes = bytes;
    a.out = &out;
    if (ran(w, k.checksum(a), "hal_ext_kernels_t.checksum")) return out;
  }
  const auto h = staged(w, data, bytes, "memcpy (checksum staging)");
  return checksum_parallel(h.data(), bytes);
}

void shuffle(const Place& w, const void* src, const void* base, void* dst, uint64_t count, uint32_t elem_size,
             bool inverse) {
  auto host = [&](const void* s, const void* b, void* d) {
    if (inverse)
      b ? unshuffle_xor_bytes(s, b, d, count, elem_size) : unshuffle_bytes(s, d, count, elem_size);
    else
      b ? shuffle_xor_bytes(s, b, d, count, elem_size) : shuffle_bytes(s, d, count, elem_size);
  };
  if (on_host(w)) return host(src, base, dst);
  if (const auto k = entries(w); k.has(hal::KernelEntries::Entry::shuffle)) {
    auto a = args_for<hal_kernel_shuffle_args_t>(w);
    a.src = src;
    a.base = base;
    a.dst = dst;
    a.count = count;
    a.elem_size = elem_size;
    a.inverse = inverse ? 1 : 0;
    if (ran(w, k.shuffle(a), "hal_ext_kernels_t.shuffle")) return;
  }
  const uint64_t bytes = count * elem_size;
  const auto s = staged(w, src, bytes, "memcpy (shuffle staging)");
  std::vector<uint8_t> b;
  if (base != nullptr) b = staged(w, base, bytes, "memcpy (shuffle staging)");
  std::vector<uint8_t> d(bytes);
  host(s.data(), base ? b.data() : nullptr, d.data());
  to_device(w, dst, d.data(), bytes, "memcpy (shuffle staging)");
}

void moe_permute(const Place& w, const void* tokens, uint64_t num_tokens, uint64_t hidden, hal_dtype_t dtype,
                 const int64_t* row_of, uint32_t top_k, uint64_t out_rows, void* out) {
  if (on_host(w)) return moe_permute(tokens, num_tokens, hidden, dtype, row_of, top_k, out);
  const uint64_t row = hidden * hal::dtype_size(dtype);
  if (row == 0 && hidden > 0)
    return moe_permute(tokens, num_tokens, hidden, dtype, row_of, top_k, out);  // throws
  if (const auto k = entries(w); k.has(hal::KernelEntries::Entry::moe_permute)) {
    auto a = args_for<hal_kernel_moe_permute_args_t>(w);
    a.tokens = tokens;
    a.num_tokens = num_tokens;
    a.row_bytes = row;
    a.row_of = row_of;
    a.top_k = top_k;
    a.out = out;
    if (ran(w, k.moe_permute(a), "hal_ext_kernels_t.moe_permute")) return;
  }
  const auto t = staged(w, tokens, num_tokens * row, "memcpy (moe_permute staging)");
  std::vector<int64_t> r(num_tokens * top_k);
  to_host(w, r.data(), row_of, r.size() * sizeof(int64_t), "memcpy (moe_permute staging)");
  for (int64_t x : r) {
    if (x >= static_cast<int64_t>(out_rows))
      throw Error(Code::invalid_argument, "moe_permute: row " + std::to_string(x) + " is past the " +
                                              std::to_string(out_rows) + " rows of out");
  }
  // Rows no choice goes to keep their bytes: start from out's own.
  auto o = staged(w, out, out_rows * row, "memcpy (moe_permute staging)");
  moe_permute(t.data(), num_tokens, hidden, dtype, r.data(), top_k, o.data());
  to_device(w, out, o.data(), o.size(), "memcpy (moe_permute staging)");
}

void moe_unpermute(const Place& w, const void* expert_out, uint64_t expert_rows, const int64_t* row_of,
                   const float* weights, uint64_t num_tokens, uint32_t top_k, uint64_t hidden,
                   hal_dtype_t dtype, void* out) {
  if (on_host(w)) return moe_unpermute(expert_out, row_of, weights, num_tokens, top_k, hidden, dtype, out);
  if (const auto k = entries(w); k.has(hal::KernelEntries::Entry::moe_unpermute)) {
    auto a = args_for<hal_kernel_moe_unpermute_args_t>(w);
    a.expert_out = expert_out;
    a.row_of = row_of;
    a.weights = weights;
    a.num_tokens = num_tokens;
    a.top_k = top_k;
    a.hidden = hidden;
    a.dtype = dtype;
    a.out = out;
    if (ran(w, k.moe_unpermute(a), "hal_ext_kernels_t.moe_unpermute")) return;
  }
  const uint64_t row = hidden * hal::dtype_size(dtype);
  const auto e = staged(w, expert_out, expert_rows * row, "memcpy (moe_unpermute staging)");
  std::vector<int64_t> r(num_tokens * top_k);
  to_host(w, r.data(), row_of, r.size() * sizeof(int64_t), "memcpy (moe_unpermute staging)");
  std::vector<float> wt(num_tokens * top_k);
  to_host(w, wt.data(), weights, wt.size() * sizeof(float), "memcpy (moe_unpermute staging)");
  for (int64_t x : r) {
    if (x >= static_cast<int64_t>(expert_rows))
      throw Error(Code::invalid_argument, "moe_unpermute: row " + std::to_string(x) + " is past the " +
                                              std::to_string(expert_rows) + " expert rows");
  }
  std::vector<uint8_t> o(num_tokens * row);
  moe_unpermute(e.data(), r.data(), wt.data(), num_tokens, top_k, hidden, dtype, o.data());
  to_device(w, out, o.data(), o.size(), "memcpy (moe_unpermute staging)");
}

}  // namespace sigma::kernels
