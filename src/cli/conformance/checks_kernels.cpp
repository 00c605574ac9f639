// The device-kernels extension (HAL_EXT_KERNELS), where a plugin chains it:
// each entry against libsigma's CPU kernel on the same bytes, at odd sizes,
// misaligned starts, and with NaN and Inf among the values.
#include "suite.hpp"

#include <sigma/kernels.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace sigma::conformance {
namespace {

// Device memory holding `bytes` at offset `skew` (a misaligned start).
struct At {
  hal::Buffer buf;
  uint64_t skew;
  At(const hal::PluginPtr& p, uint64_t bytes, uint64_t skew_) : buf(p, 0, bytes + skew_), skew(skew_) {}
  void* ptr() const { return static_cast<uint8_t*>(buf.data()) + skew; }
  void put(const void* src, uint64_t bytes) { buf.copy_from_host(src, bytes, skew); }
  std::vector<uint8_t> get(uint64_t bytes) const {
    std::vector<uint8_t> h(bytes);
    buf.copy_to_host(h.data(), bytes, skew);
    return h;
  }
};

// f32 / f16 / bf16 gradient-like values with NaN and +-Inf sprinkled in.
std::vector<uint8_t> values(hal_dtype_t dt, uint64_t n, uint32_t seed) {
  const uint64_t es = dt == HAL_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> out(n * es);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 0.02f);
  for (uint64_t i = 0; i < n; ++i) {
    float f = d(rng);
    if (i % 1009 == 17) f = NAN;
    if (i % 2003 == 5) f = i % 2 ? INFINITY : -INFINITY;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (dt == HAL_DTYPE_F32) {
      std::memcpy(&out[i * 4], &u, 4);
    } else if (dt == HAL_DTYPE_BF16) {
      const uint16_t b = static_cast<uint16_t>(u >> 16);
      std::memcpy(&out[i * 2], &b, 2);
    } else {
      const _Float16 h = static_cast<_Float16>(f);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<uint8_t> random_bytes(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

using Kernels = hal::KernelEntries;
using Entry = hal::KernelEntries::Entry;

void need(const Kernels& k, Entry e, const char* name) {
  if (!k.has(e)) throw Skip{std::string("the plugin's HAL_EXT_KERNELS has no ") + name};
}

// An entry's args on device 0, struct_size set and the rest zero.
template <typename Args>
Args args() {
  Args a{};
  a.struct_size = sizeof a;
  return a;
}

hal_status_t scan(const Kernels& k, const void* data, uint64_t count, hal_dtype_t dtype,
                  hal_kernel_scan_result_t* out) {
  auto a = args<hal_kernel_grad_scan_args_t>();
  a.data = data;
  a.count = count;
  a.dtype = dtype;
  a.out = out;
  return k.grad_scan(a);
}

hal_status_t shuffle(const Kernels& k, const void* src, const void* base, void* dst, uint64_t count,
                     uint32_t elem_size, uint32_t inverse) {
  auto a = args<hal_kernel_shuffle_args_t>();
  a.src = src;
  a.base = base;
  a.dst = dst;
  a.count = count;
  a.elem_size = elem_size;
  a.inverse = inverse;
  return k.shuffle(a);
}

hal_status_t checksum(const Kernels& k, const void* data, uint64_t bytes, uint64_t* out) {
  auto a = args<hal_kernel_checksum_args_t>();
  a.data = data;
  a.bytes = bytes;
  a.out = out;
  return k.checksum(a);
}

hal_status_t permute(const Kernels& k, const void* tokens, uint64_t num_tokens, uint64_t row_bytes,
                     const void* row_of, uint32_t top_k, void* out) {
  auto a = args<hal_kernel_moe_permute_args_t>();
  a.tokens = tokens;
  a.num_tokens = num_tokens;
  a.row_bytes = row_bytes;
  a.row_of = static_cast<const int64_t*>(row_of);
  a.top_k = top_k;
  a.out = out;
  return k.moe_permute(a);
}

hal_status_t unpermute(const Kernels& k, const void* expert_out, const void* row_of, const void* weights,
                       uint64_t num_tokens, uint32_t top_k, uint64_t hidden, hal_dtype_t dtype, void* out) {
  auto a = args<hal_kernel_moe_unpermute_args_t>();
  a.expert_out = expert_out;
  a.row_of = static_cast<const int64_t*>(row_of);
  a.weights = static_cast<const float*>(weights);
  a.num_tokens = num_tokens;
  a.top_k = top_k;
  a.hidden = hidden;
  a.dtype = dtype;
  a.out = out;
  return k.moe_unpermute(a);
}

void check_grad_scan(Context& ctx, const Kernels& k) {
  auto& plugin = *ctx.plugin();
  const auto pp = ctx.plugin();
  need(k, Entry::grad_scan, "grad_scan");
  for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    const uint64_t es = dt == HAL_DTYPE_F32 ? 4 : 2;
    for (auto [n, skew] : {std::pair<uint64_t, uint64_t>{0, 0},
                           {1, 1},
                           {33, 3},
                           {100003, 2},
                           {1u << 20, 0},
                           {(1u << 23) + 5, 1}}) {
      const auto h = values(dt, n, static_cast<uint32_t>(n + dt));
      At d(pp, h.size(), skew * es);
      d.put(h.data(), h.size());
      hal_kernel_scan_result_t r{};
      plugin.check(scan(k, d.ptr(), n, dt, &r), "hal_ext_kernels_t.grad_scan");
      const auto want = kernels::grad_scan(h.data(), n, dt);
      const std::string at = hal::dtype_name(dt) + " x " + std::to_string(n) + ": ";
      expect(r.non_finite == want.non_finite, at + "non_finite " + std::to_string(r.non_finite) +
                                                  ", the CPU kernel counts " +
                                                  std::to_string(want.non_finite));
      expect(r.amax == want.amax, at + "amax differs from the CPU kernel's");
      expect(std::fabs(r.sum_squares - want.sum_squares) <= 1e-6 * want.sum_squares,
             at + "sum_squares " + std::to_string(r.sum_squares) + ", the CPU kernel's " +
                 std::to_string(want.sum_squares));
    }
  }
  hal_kernel_scan_result_t r{};
  At d(pp, 8, 0);
  expect(scan(k, d.ptr(), 2, HAL_DTYPE_F64, &r) == HAL_ERR_INVALID_ARGUMENT, "grad_scan took dtype f64");
}

void check_shuffle(Context& ctx, const Kernels& k) {
  auto& plugin = *ctx.plugin();
  const auto pp = ctx.plugin();
  need(k, Entry::shuffle, "shuffle");
  for (uint32_t es : {1u, 2u, 3u, 4u, 8u}) {
    for (auto [n, skew] : {std::pair<uint64_t, uint64_t>{1, 1}, {31, 0}, {65537, 5}}) {
      const uint64_t bytes = n * es;
      const auto src = random_bytes(bytes, es * 7 + 1), base = random_bytes(bytes, es * 7 + 2);
      At s(pp, bytes, skew), b(pp, bytes, skew + 1), o(pp, bytes, 2), back(pp, bytes, 0);
      s.put(src.data(), bytes);
      b.put(base.data(), bytes);
      for (const bool with_base : {false, true}) {
        std::vector<uint8_t> want(bytes), again(bytes);
        kernels::shuffle({}, src.data(), with_base ? base.data() : nullptr, want.data(), n, es, false);
        plugin.check(shuffle(k, s.ptr(), with_base ? b.ptr() : nullptr, o.ptr(), n, es, 0),
                     "hal_ext_kernels_t.shuffle");
        const std::string at = std::to_string(n) + " x " + std::to_string(es) + " bytes" +
                               (with_base ? " with base" : "") + ": ";
        expect(o.get(bytes) == want, at + "shuffle differs from the CPU kernel's bytes");
        plugin.check(shuffle(k, o.ptr(), with_base ? b.ptr() : nullptr, back.ptr(), n, es, 1),
                     "hal_ext_kernels_t.shuffle (inverse)");
        expect(back.get(bytes) == src, at + "unshuffle did not give the input back");
      }
    }
  }
}

void check_checksum(Context& ctx, const Kernels& k) {
  auto& plugin = *ctx.plugin();
  const auto pp = ctx.plugin();
  need(k, Entry::checksum, "checksum");
  // Up to 32 MiB: past what a device's first pass over the threads covers.
  const auto h = random_bytes((1 << 25) + 11, 99);
  for (uint64_t skew : {0u, 1u, 5u, 8u, 12u}) {
    At d(pp, h.size(), skew);
    d.put(h.data(), h.size());
    for (uint64_t len : {0u, 1u, 7u, 8u, 9u, 4099u, 1u << 20, (1u << 25) + 11}) {
      uint64_t got = 0;
      plugin.check(checksum(k, d.ptr(), len, &got), "hal_ext_kernels_t.checksum");
      expect(got == kernels::checksum_parallel(h.data(), len),
             std::to_string(len) + " bytes at offset " + std::to_string(skew) + ": sigma-h64 differs");
    }
  }
}

void check_moe(Context& ctx, const Kernels& k) {
  auto& plugin = *ctx.plugin();
  const auto pp = ctx.plugin();
  need(k, Entry::moe_permute, "moe_permute");
  need(k, Entry::moe_unpermute, "moe_unpermute");
  const uint64_t tokens = 257, hidden = 67;
  const uint32_t top_k = 2, experts = 5;
  std::vector<int32_t> ids(tokens * top_k);
  for (uint64_t t = 0; t < tokens; ++t) {
    ids[t * top_k] = static_cast<int32_t>(t % experts);
    ids[t * top_k + 1] = t % 11 == 0 ? -1 : static_cast<int32_t>((t * 3 + 1) % experts);
  }
  std::vector<int64_t> row(tokens * top_k);
  std::vector<uint64_t> off(experts + 1);
  kernels::moe_plan(ids.data(), tokens, top_k, experts, row.data(), off.data());
  const uint64_t rows = off[experts];
  std::vector<float> w(tokens * top_k);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f + 0.5f * static_cast<float>(i % 3);
  At drow(pp, row.size() * 8, 0), dw(pp, w.size() * 4, 0);
  drow.put(row.data(), row.size() * 8);
  dw.put(w.data(), w.size() * 4);
  for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    const uint64_t es = dt == HAL_DTYPE_F32 ? 4 : 2, row_bytes = hidden * es;
    const auto x = values(dt, tokens * hidden, 3);
    std::vector<uint8_t> mid(rows * row_bytes), back(tokens * row_bytes);
    kernels::moe_permute(x.data(), tokens, hidden, dt, row.data(), top_k, mid.data());
    kernels::moe_unpermute(mid.data(), row.data(), w.data(), tokens, top_k, hidden, dt, back.data());
    At dx(pp, x.size(), 0), dmid(pp, mid.size(), 0), dback(pp, back.size(), 0);
    dx.put(x.data(), x.size());
    plugin.check(permute(k, dx.ptr(), tokens, row_bytes, drow.ptr(), top_k, dmid.ptr()),
                 "hal_ext_kernels_t.moe_permute");
    expect(dmid.get(mid.size()) == mid,
           hal::dtype_name(dt) + ": moe_permute differs from the CPU kernel's rows");
    dmid.put(mid.data(), mid.size());
    plugin.check(unpermute(k, dmid.ptr(), drow.ptr(), dw.ptr(), tokens, top_k, hidden, dt, dback.ptr()),
                 "hal_ext_kernels_t.moe_unpermute");
    // Sums of two f32 products: the same in any order but for FMA
    // contraction, so compared as values, to a few units in the last place.
    const auto got = dback.get(back.size());
    uint64_t off_by = 0;
    for (uint64_t i = 0; i < tokens * hidden; ++i) {
      float a = 0, b = 0;
      if (dt == HAL_DTYPE_F32) {
        std::memcpy(&a, &got[i * 4], 4);
        std::memcpy(&b, &back[i * 4], 4);
      } else {
        uint16_t ua, ub;
        std::memcpy(&ua, &got[i * 2], 2);
        std::memcpy(&ub, &back[i * 2], 2);
        if (dt == HAL_DTYPE_BF16) {
          const uint32_t wa = static_cast<uint32_t>(ua) << 16, wb = static_cast<uint32_t>(ub) << 16;
          std::memcpy(&a, &wa, 4);
          std::memcpy(&b, &wb, 4);
        } else {
          _Float16 ha, hb;
          std::memcpy(&ha, &ua, 2);
          std::memcpy(&hb, &ub, 2);
          a = static_cast<float>(ha);
          b = static_cast<float>(hb);
        }
      }
      const bool same =
          (std::isnan(a) && std::isnan(b)) || a == b ||
          std::fabs(a - b) <= 4 * std::numeric_limits<float>::epsilon() * std::fabs(b) * (es == 4 ? 1 : 8192);
      off_by += same ? 0 : 1;
    }
    expect(off_by == 0, hal::dtype_name(dt) + ": moe_unpermute differs from the CPU kernel in " +
                            std::to_string(off_by) + " values");
  }
}

}  // namespace

void run_kernel_checks(Context& ctx) {
  const Kernels k(*ctx.plugin());
  const bool chained = ctx.plugin()->kernels() != nullptr || ctx.plugin()->kernels_v1_2() != nullptr;
  auto need = [&] {
    if (!chained) throw Skip{"no HAL_EXT_KERNELS chained"};
    if (!ctx.has_device()) throw Skip{"no device"};
  };

  ctx.run("kernels.grad_scan", [&] {
    need();
    check_grad_scan(ctx, k);
  });

  ctx.run("kernels.shuffle", [&] {
    need();
    check_shuffle(ctx, k);
  });

  ctx.run("kernels.checksum", [&] {
    need();
    check_checksum(ctx, k);
  });

  ctx.run("kernels.moe", [&] {
    need();
    check_moe(ctx, k);
  });

  // From 1.3 each entry takes an args struct: one smaller than 1.3's is refused.
  ctx.run("kernels.args_struct_size", [&] {
    need();
    if (ctx.plugin()->api().abi_minor < 3) throw Skip{"a 1.2 plugin's entries are positional"};
    if (!k.has(Entry::checksum)) throw Skip{"the plugin's HAL_EXT_KERNELS has no checksum"};
    At d(ctx.plugin(), 8, 0);
    uint64_t got = 0;
    auto a = args<hal_kernel_checksum_args_t>();
    a.data = d.ptr();
    a.bytes = 8;
    a.out = &got;
    a.struct_size = 8;
    expect(k.checksum(a) == HAL_ERR_INVALID_ARGUMENT,
           "checksum took args whose struct_size (8) is smaller than 1.3's");
  });
}

}  // namespace sigma::conformance
