// The CPU kernels against the memory-bandwidth limit measured in the same
// run: the fused gradient scan vs a plain read of the same buffer (a sum the
// compiler vectorises), with 1 and 2 threads; fused shuffle + XOR and its
// inverse vs memcpy and vs a plain XOR of two buffers (the same three
// streams).
//
//   bench_kernels [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <sigma/kernels.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBytes = size_t{1} << 30;  // 1 GiB: far beyond the caches

// A gradient-like value for element i: small, both signs, a few exact zeros.
float value(size_t i) { return static_cast<float>(static_cast<int>(i * 2654435761u % 2001) - 1000) * 1e-6f; }

uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);  // round to nearest even
}

// kBytes of `dtype` values (f32, bf16 or f16), made once per dtype.
const uint8_t* buffer(hal_dtype_t dtype = HAL_DTYPE_F32) {
  static std::vector<uint8_t> f32, bf16, f16;
  auto& v = dtype == HAL_DTYPE_F32 ? f32 : dtype == HAL_DTYPE_BF16 ? bf16 : f16;
  if (v.empty()) {
    v.resize(kBytes);
    if (dtype == HAL_DTYPE_F32) {
      auto* f = reinterpret_cast<float*>(v.data());
      for (size_t i = 0; i < kBytes / 4; ++i) f[i] = value(i);
    } else {
      auto* h = reinterpret_cast<uint16_t*>(v.data());
      for (size_t i = 0; i < kBytes / 2; ++i) {
        // f16 gradients are loss-scaled into its normal range.
        const _Float16 half = static_cast<_Float16>(value(i) * 1024.0f);
        if (dtype == HAL_DTYPE_BF16)
          h[i] = to_bf16(value(i));
        else
          std::memcpy(&h[i], &half, 2);
      }
    }
  }
  return v.data();
}

// Runs fn(begin, end) over the buffer split into `threads` parts.
template <typename F>
void split(int threads, size_t bytes, size_t align, F fn) {
  std::vector<std::thread> ts;
  const size_t part = (bytes / threads) / align * align;
  for (int t = 0; t < threads; ++t) {
    const size_t b = t * part, e = t + 1 == threads ? bytes : b + part;
    ts.emplace_back([=] { fn(b, e); });
  }
  for (auto& t : ts) t.join();
}

// The limit: read every byte once, doing the least work the compiler allows.
void BM_ReadLimit(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const uint8_t* p = buffer();
  for (auto _ : state) {
    split(threads, kBytes, 64, [&](size_t b, size_t e) {
      const auto* f = reinterpret_cast<const float*>(p + b);
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
      const size_t n = (e - b) / 4;
      for (size_t i = 0; i + 8 <= n; i += 8) {
        s0 += f[i];
        s1 += f[i + 1];
        s2 += f[i + 2];
        s3 += f[i + 3];
        s4 += f[i + 4];
        s5 += f[i + 5];
        s6 += f[i + 6];
        s7 += f[i + 7];
      }
      benchmark::DoNotOptimize(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7);
    });
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_GradScan(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto dtype = static_cast<hal_dtype_t>(state.range(1));
  const size_t es = dtype == HAL_DTYPE_F32 ? 4 : 2;
  const uint8_t* p = buffer(dtype);
  for (auto _ : state) {
    split(threads, kBytes, 64, [&](size_t b, size_t e) {
      benchmark::DoNotOptimize(sigma::kernels::grad_scan(p + b, (e - b) / es, dtype));
    });
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_Memcpy(benchmark::State& state) {
  static std::vector<uint8_t> dst(kBytes / 4);
  const uint8_t* p = buffer();
  for (auto _ : state) {
    std::memcpy(dst.data(), p, kBytes / 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (kBytes / 4));
}

// The three-stream limit that shuffle + XOR has to live with: out = a ^ b
// (two reads and a write per byte, where memcpy has one of each).
void BM_XorLimit(benchmark::State& state) {
  static std::vector<uint8_t> out(kBytes / 4);
  const uint8_t* p = buffer();
  for (auto _ : state) {
    sigma::kernels::xor_bytes(p, p + kBytes / 4, out.data(), kBytes / 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (kBytes / 4));
}

// Shuffle + XOR of 256 MiB of f32 against a base, fused, then the inverse:
// both against memcpy of the same bytes (read once, write once).
// 64-byte aligned scratch, as the checkpoint engine's buffers are (a
// std::vector's large block is only 16-byte aligned).
uint8_t* scratch(size_t bytes) { return static_cast<uint8_t*>(std::aligned_alloc(64, bytes)); }

void BM_ShuffleXor(benchmark::State& state) {
  static uint8_t* out = scratch(kBytes / 4);
  static uint8_t* back = scratch(kBytes / 4);
  const uint8_t* p = buffer();
  const uint8_t* base = p + kBytes / 4;
  const bool inverse = state.range(0) == 1;  // 0: shuffle + XOR, 1: its inverse, 2: shuffle alone
  for (auto _ : state) {
    if (inverse)
      sigma::kernels::unshuffle_xor_bytes(out, base, back, kBytes / 16, 4);
    else if (state.range(0) == 2)
      sigma::kernels::shuffle_bytes(p, out, kBytes / 16, 4);
    else
      sigma::kernels::shuffle_xor_bytes(p, base, out, kBytes / 16, 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (kBytes / 4));
}

}  // namespace

BENCHMARK(BM_ReadLimit)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GradScan)
    ->Args({1, HAL_DTYPE_F32})
    ->Args({2, HAL_DTYPE_F32})
    ->Args({1, HAL_DTYPE_BF16})
    ->Args({2, HAL_DTYPE_BF16})
    ->Args({1, HAL_DTYPE_F16})
    ->Args({2, HAL_DTYPE_F16})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_XorLimit)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ShuffleXor)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
