// The cuda vendor's device kernels (HAL_EXT_KERNELS) against the CPU
// versions, through libsigma's Place entry points on buffers the plugin
// allocated. Skipped, and reported as skipped, on a machine without a
// usable GPU; tests/device/run.sh runs it on one.
#include <sigma/error.hpp>
#include <sigma/hal.hpp>
#include <sigma/kernels.hpp>

#include "gpu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace sigma::kernels {
namespace {

#define REQUIRE_GPU() SIGMA_REQUIRE_GPU()

hal::PluginPtr& cuda() {
  static hal::PluginPtr p = hal::Plugin::load("cuda");
  return p;
}

Place gpu() { return {cuda().get(), 0}; }

// Device memory of the cuda plugin holding a copy of host bytes.
struct Dev {
  hal::Buffer b;
  void* p;
  size_t n;
  explicit Dev(size_t bytes, const void* from = nullptr)
      : b(cuda(), 0, bytes ? bytes : 1), p(b.data()), n(bytes) {
    if (from) b.copy_from_host(from, bytes);
  }
  std::vector<uint8_t> host() const {
    std::vector<uint8_t> h(n);
    b.copy_to_host(h.data(), n);
    return h;
  }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(CudaKernels, ScanMatchesTheCpuForEveryDtype) {
  REQUIRE_GPU();
  for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    const size_t es = dt == HAL_DTYPE_F32 ? 4 : 2, n = 1000003;
    std::vector<uint8_t> h(n * es);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0, 0.01f);
    for (size_t i = 0; i < n; ++i) {
      float f = i % 99991 == 0 ? NAN : d(rng);
      if (dt == HAL_DTYPE_F32)
        std::memcpy(&h[i * 4], &f, 4);
      else if (dt == HAL_DTYPE_F16) {
        const _Float16 x = static_cast<_Float16>(f);
        std::memcpy(&h[i * 2], &x, 2);
      } else {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t b = static_cast<uint16_t>(u >> 16);
        std::memcpy(&h[i * 2], &b, 2);
      }
    }
    Dev dv(h.size(), h.data());
    const ScanResult cpu = grad_scan(h.data(), n, dt), on_gpu = grad_scan(gpu(), dv.p, n, dt);
    EXPECT_EQ(on_gpu.non_finite, cpu.non_finite) << dt;
    EXPECT_EQ(on_gpu.amax, cpu.amax) << dt;
    EXPECT_NEAR(on_gpu.sum_squares, cpu.sum_squares, 1e-6 * cpu.sum_squares) << dt;
  }
}

TEST(CudaKernels, ShuffleAndChecksumMatchTheCpu) {
  REQUIRE_GPU();
  for (uint32_t es : {2u, 4u, 8u}) {
    const size_t n = 100001, bytes = n * es;
    const auto src = random_bytes(bytes, es), base = random_bytes(bytes, es + 100);
    std::vector<uint8_t> cpu(bytes);
    shuffle_xor_bytes(src.data(), base.data(), cpu.data(), n, es);
    Dev s(bytes, src.data()), b(bytes, base.data()), out(bytes), back(bytes);
    shuffle(gpu(), s.p, b.p, out.p, n, es, false);
    EXPECT_EQ(out.host(), cpu) << es;
    shuffle(gpu(), out.p, b.p, back.p, n, es, true);
    EXPECT_EQ(back.host(), src) << es;
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, bytes, bytes - 3}) {
      EXPECT_EQ(checksum_parallel(gpu(), s.p, len), checksum_parallel(src.data(), len)) << len;
    }
  }
}

TEST(CudaKernels, MoePermuteAndUnpermuteMatchTheCpu) {
  REQUIRE_GPU();
  const uint64_t tokens = 513, hidden = 300;
  const uint32_t k = 2, experts = 7;
  std::vector<int32_t> ids(tokens * k);
  for (uint64_t t = 0; t < tokens; ++t) {
    ids[t * k] = static_cast<int32_t>(t % experts);
    ids[t * k + 1] = t % 13 == 0 ? -1 : static_cast<int32_t>((t * 3 + 1) % experts);
  }
  std::vector<int64_t> row(tokens * k);
  std::vector<uint64_t> off(experts + 1);
  moe_plan(ids.data(), tokens, k, experts, row.data(), off.data());
  std::vector<float> x(tokens * hidden), w(tokens * k, 0.25f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 101) * 0.5f;
  std::vector<float> cpu_mid(off[experts] * hidden), cpu_back(tokens * hidden);
  moe_permute(x.data(), tokens, hidden, HAL_DTYPE_F32, row.data(), k, cpu_mid.data());
  moe_unpermute(cpu_mid.data(), row.data(), w.data(), tokens, k, hidden, HAL_DTYPE_F32, cpu_back.data());
  Dev dx(x.size() * 4, x.data()), drow(row.size() * 8, row.data()), dw(w.size() * 4, w.data());
  Dev mid(cpu_mid.size() * 4), back(cpu_back.size() * 4);
  moe_permute(gpu(), dx.p, tokens, hidden, HAL_DTYPE_F32, static_cast<const int64_t*>(drow.p), k,
              off[experts], mid.p);
  const auto m = mid.host();
  for (uint64_t r = 0; r < off[experts]; ++r)
    EXPECT_EQ(0, std::memcmp(m.data() + r * hidden * 4, cpu_mid.data() + r * hidden, hidden * 4)) << r;
  moe_unpermute(gpu(), mid.p, off[experts], static_cast<const int64_t*>(drow.p),
                static_cast<const float*>(dw.p), tokens, k, hidden, HAL_DTYPE_F32, back.p);
  const auto b = back.host();
  EXPECT_EQ(0, std::memcmp(b.data(), cpu_back.data(), b.size()));
}

}  // namespace
}  // namespace sigma::kernels
