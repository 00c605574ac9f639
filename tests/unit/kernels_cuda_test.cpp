// The CUDA kernels against the CPU versions, through the same entry points
// (a device buffer picks the GPU). Skipped, and reported as skipped, on a
// machine without a usable GPU; tests/device/run.sh runs it on one.
#include <sigma/error.hpp>
#include <sigma/kernels.hpp>

#include "gpu.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace sigma::kernels {
namespace {

#define REQUIRE_GPU() SIGMA_REQUIRE_GPU()

// A device copy of host bytes, freed on scope exit.
struct Dev {
  void* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t bytes, const void* from = nullptr) : n(bytes) {
    EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    if (from) {
      EXPECT_EQ(cudaMemcpy(p, from, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~Dev() { cudaFree(p); }
  std::vector<uint8_t> host() const {
    std::vector<uint8_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
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
    const ScanResult cpu = grad_scan(h.data(), n, dt), gpu = grad_scan(dv.p, n, dt);
    EXPECT_EQ(gpu.non_finite, cpu.non_finite) << dt;
    EXPECT_EQ(gpu.amax, cpu.amax) << dt;
    EXPECT_NEAR(gpu.sum_squares, cpu.sum_squares, 1e-6 * cpu.sum_squares) << dt;
  }
}

TEST(CudaKernels, ShuffleXorAndChecksumMatchTheCpu) {
  REQUIRE_GPU();
  for (uint32_t es : {2u, 4u, 8u}) {
    const size_t n = 100001, bytes = n * es;
    const auto src = random_bytes(bytes, es), base = random_bytes(bytes, es + 100);
    std::vector<uint8_t> cpu(bytes);
    shuffle_xor_bytes(src.data(), base.data(), cpu.data(), n, es);
    Dev s(bytes, src.data()), b(bytes, base.data()), out(bytes), back(bytes);
    shuffle_xor_bytes(s.p, b.p, out.p, n, es);
    EXPECT_EQ(out.host(), cpu) << es;
    unshuffle_xor_bytes(out.p, b.p, back.p, n, es);
    EXPECT_EQ(back.host(), src) << es;
    xor_bytes(s.p, b.p, out.p, bytes);
    std::vector<uint8_t> x(bytes);
    xor_bytes(src.data(), base.data(), x.data(), bytes);
    EXPECT_EQ(out.host(), x);
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, bytes, bytes - 3}) {
      EXPECT_EQ(checksum_parallel(s.p, len), checksum_parallel(src.data(), len)) << len;
    }
    EXPECT_THROW(checksum(s.p, bytes), Error);  // xxh3 stays on the CPU
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
  moe_permute(dx.p, tokens, hidden, HAL_DTYPE_F32, static_cast<const int64_t*>(drow.p), k, mid.p);
  const auto m = mid.host();
  for (uint64_t r = 0; r < off[experts]; ++r)
    EXPECT_EQ(0, std::memcmp(m.data() + r * hidden * 4, cpu_mid.data() + r * hidden, hidden * 4)) << r;
  moe_unpermute(mid.p, static_cast<const int64_t*>(drow.p), static_cast<const float*>(dw.p), tokens, k,
                hidden, HAL_DTYPE_F32, back.p);
  const auto b = back.host();
  EXPECT_EQ(0, std::memcmp(b.data(), cpu_back.data(), b.size()));
}

TEST(CudaKernels, HostBuffersStayOnTheCpuWhereverCudaIs) {
  // Runs everywhere: with or without a GPU, a host buffer takes the CPU path.
  std::vector<float> v(1000, 0.5f);
  EXPECT_EQ(grad_scan(v.data(), v.size(), HAL_DTYPE_F32).sum_squares, 250.0);
}

}  // namespace
}  // namespace sigma::kernels
