// The CPU kernels against plain scalar references, for every ISA this CPU
// has, over edge cases: empty and single inputs, tails, unaligned starts,
// all-NaN, +-Inf, denormals, -0.0.
#include <sigma/error.hpp>
#include <sigma/kernels.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

namespace sigma::kernels {
namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::scalar};
  try {
    force_isa(Isa::avx2);
    out.push_back(Isa::avx2);
  } catch (const Error&) {
  }
  reset_isa();
  return out;
}

uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>(x >> 16);  // truncation: exact for the values used
}
uint16_t to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float from(const std::vector<uint8_t>& bytes, size_t i, hal_dtype_t dt) {
  if (dt == HAL_DTYPE_F32) {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + i * 2, 2);
  if (dt == HAL_DTYPE_F16) {
    _Float16 v;
    std::memcpy(&v, &h, 2);
    return static_cast<float>(v);
  }
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Encodes values into the dtype's bytes, starting `offset` bytes into the
// buffer (to test unaligned starts).
std::vector<uint8_t> encode(const std::vector<float>& v, hal_dtype_t dt, size_t offset) {
  const size_t es = dt == HAL_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> out(offset + v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == HAL_DTYPE_F32)
      std::memcpy(out.data() + offset + i * 4, &v[i], 4);
    else {
      const uint16_t h = dt == HAL_DTYPE_F16 ? to_f16(v[i]) : to_bf16(v[i]);
      std::memcpy(out.data() + offset + i * 2, &h, 2);
    }
  }
  return out;
}

ScanResult reference(const std::vector<uint8_t>& bytes, size_t offset, size_t n, hal_dtype_t dt) {
  std::vector<uint8_t> body(bytes.begin() + static_cast<long>(offset), bytes.end());
  ScanResult r;
  for (size_t i = 0; i < n; ++i) {
    const float v = from(body, i, dt);
    if (!std::isfinite(v)) {
      ++r.non_finite;
      continue;
    }
    r.sum_squares += static_cast<double>(v) * v;
    r.amax = std::max(r.amax, std::fabs(static_cast<double>(v)));
  }
  return r;
}

// The documented accuracy of the sum of squares: fp64 throughout for f32;
// 16-bit squares are added in pairs in f32 (one rounding) before fp64.
double tolerance(hal_dtype_t dt) { return dt == HAL_DTYPE_F32 ? 1e-12 : 0x1p-23; }

std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            INFINITY,
                            -INFINITY,
                            -0.0f,
                            1e-40f /* denormal */,
                            -65504.0f,
                            3.0e-5f};
  for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % 7];
  return v;
}

TEST(GradScan, MatchesTheScalarReferenceForEveryIsaDtypeLengthAndAlignment) {
  for (Isa isa : isas()) {
    force_isa(isa);
    for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
      for (size_t n : {0, 1, 7, 15, 16, 17, 33, 1000, 4099}) {
        for (size_t offset : {0, 1, 2, 3}) {
          const auto bytes = encode(values(n, static_cast<uint32_t>(n * 31 + offset)), dt, offset);
          const ScanResult got = grad_scan(bytes.data() + offset, n, dt);
          const ScanResult want = reference(bytes, offset, n, dt);
          SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)) + " dtype " + std::to_string(dt) +
                       " n " + std::to_string(n) + " offset " + std::to_string(offset));
          EXPECT_EQ(got.non_finite, want.non_finite);
          EXPECT_EQ(got.amax, want.amax);
          EXPECT_NEAR(got.sum_squares, want.sum_squares, tolerance(dt) * std::max(1.0, want.sum_squares));
        }
      }
    }
  }
  reset_isa();
}

// Long inputs cross the vector kernel's blocks: clean blocks take its fast
// form, a block with one NaN is scanned again exactly; both must agree with
// the reference wherever the NaN sits, including none at all.
TEST(GradScan, CleanAndNonFiniteBlocksAgreeAcrossBlockBoundaries) {
  const size_t n = 700001;
  for (Isa isa : isas()) {
    force_isa(isa);
    for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
      for (long nan_at : {-1L, 5L, 300000L, 699999L}) {
        std::mt19937 rng(static_cast<uint32_t>(nan_at + 2));
        std::normal_distribution<float> d(0.0f, 0.01f);
        std::vector<float> v(n);
        for (auto& x : v) x = d(rng);
        if (nan_at >= 0) v[static_cast<size_t>(nan_at)] = std::numeric_limits<float>::quiet_NaN();
        const auto bytes = encode(v, dt, 0);
        const ScanResult got = grad_scan(bytes.data(), n, dt), want = reference(bytes, 0, n, dt);
        SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)) + " dtype " + std::to_string(dt) +
                     " nan at " + std::to_string(nan_at));
        EXPECT_EQ(got.non_finite, nan_at >= 0 ? 1u : 0u);
        EXPECT_EQ(got.amax, want.amax);
        EXPECT_NEAR(got.sum_squares, want.sum_squares, tolerance(dt) * want.sum_squares);
      }
    }
  }
  reset_isa();
}

// bf16 has f32's range: squares of huge values would overflow f32 and those
// of tiny ones fall below its normal range. Such blocks go the exact way.
TEST(GradScan, Bf16HugeAndTinyValuesKeepTheirSquares) {
  for (Isa isa : isas()) {
    force_isa(isa);
    for (float scale : {1e30f, -3e38f, 1e-20f, 1e-38f}) {
      std::vector<float> v(1000);
      for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(1 + i % 3);
      const auto bytes = encode(v, HAL_DTYPE_BF16, 0);
      const ScanResult got = grad_scan(bytes.data(), v.size(), HAL_DTYPE_BF16),
                       want = reference(bytes, 0, v.size(), HAL_DTYPE_BF16);
      SCOPED_TRACE("scale " + std::to_string(scale));
      EXPECT_EQ(got.non_finite, std::isfinite(scale * 3) ? 0u : want.non_finite);
      EXPECT_TRUE(std::isfinite(got.sum_squares));
      EXPECT_GT(got.sum_squares, 0.0);
      EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares);
      EXPECT_EQ(got.amax, want.amax);
    }
  }
  reset_isa();
}

TEST(GradScan, AllNaNAndAllInfAreCountedAndLeaveNoSum) {
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> nan(100, std::numeric_limits<float>::quiet_NaN()), inf(37, -INFINITY);
    ScanResult r = grad_scan(nan.data(), nan.size(), HAL_DTYPE_F32);
    EXPECT_EQ(r.non_finite, 100u);
    EXPECT_EQ(r.sum_squares, 0.0);
    EXPECT_EQ(r.amax, 0.0);
    r = grad_scan(inf.data(), inf.size(), HAL_DTYPE_F32);
    EXPECT_EQ(r.non_finite, 37u);
  }
  reset_isa();
}

TEST(GradScan, DenormalsAndNegativeZeroCountAsFinite) {
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> v(20, -0.0f);
    v[5] = 1e-40f;
    const ScanResult r = grad_scan(v.data(), v.size(), HAL_DTYPE_F32);
    EXPECT_EQ(r.non_finite, 0u);
    EXPECT_EQ(r.amax, static_cast<double>(1e-40f));
    EXPECT_GT(r.sum_squares, 0.0);
  }
  reset_isa();
}

TEST(GradScan, OtherDtypesAndNullAreRefused) {
  float x = 1;
  EXPECT_THROW(grad_scan(&x, 1, HAL_DTYPE_I32), Error);
  EXPECT_THROW(grad_scan(nullptr, 4, HAL_DTYPE_F32), Error);
  EXPECT_EQ(grad_scan(nullptr, 0, HAL_DTYPE_F32).non_finite, 0u);
}

TEST(Shuffle, PutsEachBytePlaneTogetherAndRoundTrips) {
  const uint8_t src[] = {1, 2, 3, 4, 5, 6, 7, 8};  // two 4-byte elements
  uint8_t dst[8], back[8];
  shuffle_bytes(src, dst, 2, 4);
  const uint8_t want[] = {1, 5, 2, 6, 3, 7, 4, 8};
  EXPECT_EQ(std::memcmp(dst, want, 8), 0);
  unshuffle_bytes(dst, back, 2, 4);
  EXPECT_EQ(std::memcmp(back, src, 8), 0);
  EXPECT_THROW(shuffle_bytes(src, dst, 2, 0), Error);
}

// Every ISA, element size and length (vector bodies of 32 elements and
// their tails), at unaligned starts, against the definition; the fused XOR
// forms against shuffle-of-XOR, and every pair round-trips.
// memcmp, but defined for zero bytes at NULL (an empty vector's data()).
bool same(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

TEST(Shuffle, MatchesTheDefinitionWithAndWithoutABaseForEveryIsa) {
  for (Isa isa : isas()) {
    force_isa(isa);
    for (uint32_t es : {1u, 2u, 3u, 4u, 8u}) {
      for (size_t n : {0, 1, 17, 31, 32, 33, 64, 95, 1001}) {
        const size_t bytes = n * es, off = 3;
        std::vector<uint8_t> in(bytes + off), base(bytes + off), mid(bytes + off), out(bytes + off),
            want(bytes);
        for (size_t i = 0; i < in.size(); ++i) {
          in[i] = static_cast<uint8_t>(i * 37 + es);
          base[i] = static_cast<uint8_t>(i * 11 + 5);
        }
        const uint8_t* src = in.data() + off;
        const uint8_t* bas = base.data() + off;
        SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)) + " elem " + std::to_string(es) + " n " +
                     std::to_string(n));
        for (size_t i = 0; i < n; ++i)
          for (uint32_t b = 0; b < es; ++b) want[b * n + i] = src[i * es + b];
        shuffle_bytes(src, mid.data() + off, n, es);
        EXPECT_TRUE(same(mid.data() + off, want.data(), bytes));
        unshuffle_bytes(mid.data() + off, out.data() + off, n, es);
        EXPECT_TRUE(same(out.data() + off, src, bytes));
        for (size_t i = 0; i < n; ++i)
          for (uint32_t b = 0; b < es; ++b) want[b * n + i] = src[i * es + b] ^ bas[i * es + b];
        shuffle_xor_bytes(src, bas, mid.data() + off, n, es);
        EXPECT_TRUE(same(mid.data() + off, want.data(), bytes));
        unshuffle_xor_bytes(mid.data() + off, bas, out.data() + off, n, es);
        EXPECT_TRUE(same(out.data() + off, src, bytes));
      }
    }
  }
  reset_isa();
  uint8_t x = 1;
  EXPECT_THROW(shuffle_xor_bytes(&x, nullptr, &x, 1, 1), Error);
  EXPECT_THROW(unshuffle_xor_bytes(&x, &x, nullptr, 1, 1), Error);
}

// Outputs of 8 MiB and more with aligned planes take the streaming stores.
TEST(Shuffle, LargeAlignedBuffersRoundTripThroughTheStreamingPath) {
  for (uint32_t es : {2u, 4u}) {
    const uint64_t n = (uint64_t{9} << 20) / es;  // 9 MiB, a multiple of 32 elements
    std::vector<uint8_t> in(n * es), base(n * es);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<uint8_t>(i * 31 + 7), base[i] = static_cast<uint8_t>(i >> 5);
    auto* mid = static_cast<uint8_t*>(std::aligned_alloc(64, n * es));
    auto* back = static_cast<uint8_t*>(std::aligned_alloc(64, n * es));
    for (Isa isa : isas()) {
      force_isa(isa);
      shuffle_xor_bytes(in.data(), base.data(), mid, n, es);
      bool ok = true;
      for (uint64_t i = 0; i < n && ok; i += 4097)
        for (uint32_t b = 0; b < es; ++b) ok &= mid[b * n + i] == (in[i * es + b] ^ base[i * es + b]);
      EXPECT_TRUE(ok) << "elem " << es << " isa " << static_cast<int>(isa);
      unshuffle_xor_bytes(mid, base.data(), back, n, es);
      EXPECT_TRUE(same(back, in.data(), in.size())) << "elem " << es;
    }
    reset_isa();
    std::free(mid);
    std::free(back);
  }
}

TEST(Xor, IsItsOwnInverseAtAnyLengthAndInPlace) {
  for (size_t n : {0, 1, 7, 8, 9, 1000}) {
    std::vector<uint8_t> a(n), b(n), d(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<uint8_t>(i * 13);
      b[i] = static_cast<uint8_t>(i * 7 + 1);
    }
    xor_bytes(a.data(), b.data(), d.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], a[i] ^ b[i]);
    xor_bytes(d.data(), b.data(), d.data(), n);
    EXPECT_EQ(d, a);
  }
}

TEST(Checksum, DependsOnEveryByteAndNotOnAlignment) {
  std::vector<uint8_t> buf(1025);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
  const uint64_t h = checksum(buf.data(), 1024);
  std::vector<uint8_t> shifted(1025);
  std::memcpy(shifted.data() + 1, buf.data(), 1024);
  EXPECT_EQ(checksum(shifted.data() + 1, 1024), h);
  buf[512] ^= 1;
  EXPECT_NE(checksum(buf.data(), 1024), h);
  EXPECT_EQ(checksum(nullptr, 0), checksum("", 0));
}

// Known answers of the reference XXH3_64bits: the per-chunk checksum is
// XXH3-64 with seed 0, not merely some hash of the bytes.
TEST(Checksum, IsXxh3WithSeedZero) {
  EXPECT_EQ(checksum("", 0), 0x2d06800538d394c2ull);
  EXPECT_EQ(checksum("a", 1), 0xe6c632b61e964e1full);
  EXPECT_EQ(checksum("abc", 3), 0x78af5f94892f3950ull);
}

// The GPU-friendly checksum's definition, guarded by values computed by an
// independent implementation of it (docs/kernels.md has the formula).
TEST(ChecksumParallel, MatchesItsDefinitionsGoldenValues) {
  EXPECT_EQ(checksum_parallel(nullptr, 0), 0x0ull);
  EXPECT_EQ(checksum_parallel("a", 1), 0xd48789040abca3c7ull);
  EXPECT_EQ(checksum_parallel("sigma-h64", 9), 0x26de39d7c8c8ada2ull);
  std::vector<uint8_t> b(1024);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i % 256);
  EXPECT_EQ(checksum_parallel(b.data(), b.size()), 0xf3c7396676e04f79ull);
}

TEST(ChecksumParallel, SeesEveryBitAndEveryPositionAtAnyAlignment) {
  std::vector<uint8_t> b(301 + 7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t off = 0; off < 8; ++off) {
    std::vector<uint8_t> copy(b.begin() + static_cast<long>(off), b.begin() + static_cast<long>(off) + 301);
    const uint64_t base = checksum_parallel(copy.data(), copy.size());
    EXPECT_EQ(base, checksum_parallel(b.data() + off, 301)) << off;
    for (size_t bit = 0; bit < 301 * 8; bit += 37) {
      copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      EXPECT_NE(checksum_parallel(copy.data(), copy.size()), base) << bit;
      copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    std::swap(copy[0], copy[8]);  // two words trade places
    ASSERT_NE(copy[0], copy[8]);
    EXPECT_NE(checksum_parallel(copy.data(), copy.size()), base);
  }
  // A trailing zero byte is not the same buffer: the length is hashed too.
  std::vector<uint8_t> z(16, 0);
  EXPECT_NE(checksum_parallel(z.data(), 15), checksum_parallel(z.data(), 16));
  EXPECT_THROW(checksum_parallel(nullptr, 3), Error);
}

// --- MoE permute / unpermute --------------------------------------------

namespace moe {

std::vector<int32_t> choices(uint64_t tokens, uint32_t k, uint32_t experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(tokens * k);
  for (uint64_t t = 0; t < tokens; ++t) {
    // Distinct experts per token, and now and then a dropped choice.
    std::vector<int32_t> pool(experts);
    for (uint32_t e = 0; e < experts; ++e) pool[e] = static_cast<int32_t>(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (uint32_t c = 0; c < k; ++c) ids[t * k + c] = rng() % 11 == 0 ? -1 : pool[c];
  }
  return ids;
}

}  // namespace moe

TEST(MoePlan, IsExpertMajorStableAndSkipsDroppedChoices) {
  // tokens 0..3, top 2: expert ids per token.
  const std::vector<int32_t> ids = {2, 0, 0, -1, 2, 1, 0, 2};
  std::vector<int64_t> row(8);
  std::vector<uint64_t> off(4);
  moe_plan(ids.data(), 4, 2, 3, row.data(), off.data());
  EXPECT_EQ(off, (std::vector<uint64_t>{0, 3, 4, 7}));
  // expert 0: (t0,k1) (t1,k0) (t3,k0); expert 1: (t2,k1); expert 2: (t0,k0) (t2,k0) (t3,k1)
  EXPECT_EQ(row, (std::vector<int64_t>{4, 0, 1, -1, 5, 3, 2, 6}));
  std::vector<int32_t> bad = {0, 3};
  EXPECT_THROW(moe_plan(bad.data(), 1, 2, 3, row.data(), off.data()), Error);
  bad = {-2, 0};
  EXPECT_THROW(moe_plan(bad.data(), 1, 2, 3, row.data(), off.data()), Error);
  moe_plan(nullptr, 0, 2, 3, nullptr, off.data());
  EXPECT_EQ(off, (std::vector<uint64_t>{0, 0, 0, 0}));
}

TEST(MoePermute, GathersEveryChoiceIntoItsRowForAnyDtype) {
  for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_I64, HAL_DTYPE_U8}) {
    const uint64_t es = dt == HAL_DTYPE_F32 ? 4 : dt == HAL_DTYPE_BF16 ? 2 : dt == HAL_DTYPE_I64 ? 8 : 1;
    for (uint64_t hidden : {1, 7, 300}) {
      const uint64_t tokens = 37;
      const uint32_t k = 2, experts = 5;
      const auto ids = moe::choices(tokens, k, experts, static_cast<uint32_t>(hidden));
      std::vector<int64_t> row(tokens * k);
      std::vector<uint64_t> off(experts + 1);
      moe_plan(ids.data(), tokens, k, experts, row.data(), off.data());
      std::vector<uint8_t> in(tokens * hidden * es), out(off[experts] * hidden * es, 0xEE);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 13 + 1);
      moe_permute(in.data(), tokens, hidden, dt, row.data(), k, out.data());
      for (uint64_t t = 0; t < tokens; ++t)
        for (uint32_t c = 0; c < k; ++c) {
          const int64_t r = row[t * k + c];
          if (r < 0) continue;
          EXPECT_EQ(0, std::memcmp(out.data() + r * hidden * es, in.data() + t * hidden * es, hidden * es))
              << "dtype " << dt << " hidden " << hidden << " token " << t;
        }
    }
  }
  EXPECT_THROW(moe_permute(nullptr, 1, 1, HAL_DTYPE_F32, nullptr, 1, nullptr), Error);
}

// Big permutations with aligned rows take the non-temporal store path:
// 32-byte stores on a 32-byte aligned output, 16-byte ones on an output 16
// bytes past such a boundary (as malloc'd vectors are).
TEST(MoePermute, LargeAlignedOutputsMatchOnEveryIsa) {
  const uint64_t tokens = 2048, hidden = 1024;
  const uint32_t k = 2, experts = 8;
  const auto ids = moe::choices(tokens, k, experts, 99);
  std::vector<int64_t> row(tokens * k);
  std::vector<uint64_t> off(experts + 1);
  moe_plan(ids.data(), tokens, k, experts, row.data(), off.data());
  std::vector<float> in(tokens * hidden);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  for (Isa isa : isas())
    for (uint64_t skew : {0, 4}) {  // floats past a 32-byte boundary
      force_isa(isa);
      std::vector<float> out(off[experts] * hidden + 12, -1.0f);
      float* aligned = out.data() + (8 - (reinterpret_cast<uintptr_t>(out.data()) % 32) / 4) % 8 + skew;
      moe_permute(in.data(), tokens, hidden, HAL_DTYPE_F32, row.data(), k, aligned);
      for (uint64_t t = 0; t < tokens; ++t)
        for (uint32_t c = 0; c < k; ++c) {
          const int64_t r = row[t * k + c];
          if (r >= 0) {
            ASSERT_TRUE(same(aligned + r * hidden, in.data() + t * hidden, hidden * 4))
                << t << " skew " << skew;
          }
        }
    }
  reset_isa();
}

// An unpermute's inputs: routed choices, their plan's rows, weights in
// [-0.5, 0.5) and expert rows in [-2, 2) encoded in `dt`.
struct UnpermuteInputs {
  std::vector<int32_t> ids;
  std::vector<int64_t> row;
  std::vector<float> w;
  std::vector<uint8_t> src;
};

UnpermuteInputs unpermute_inputs(uint64_t tokens, uint32_t k, uint32_t experts, uint64_t hidden,
                                 hal_dtype_t dt, uint32_t ids_seed, uint32_t values_seed) {
  UnpermuteInputs in{moe::choices(tokens, k, experts, ids_seed),
                     std::vector<int64_t>(tokens * k),
                     std::vector<float>(tokens * k),
                     {}};
  std::vector<uint64_t> off(experts + 1);
  moe_plan(in.ids.data(), tokens, k, experts, in.row.data(), off.data());
  std::vector<float> vals(off[experts] * hidden);
  std::mt19937 rng(values_seed);
  std::uniform_real_distribution<float> d(-2, 2);
  for (auto& v : vals) v = d(rng);
  for (auto& x : in.w) x = d(rng) / 4;
  in.src = encode(vals, dt, 0);
  return in;
}

TEST(MoeUnpermute, WeightedSumsMatchTheReferenceForEveryIsaAndDtype) {
  for (Isa isa : isas()) {
    force_isa(isa);
    for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
      for (uint64_t hidden : {1, 17, 300}) {
        const uint64_t tokens = 29;
        const uint32_t k = 4;
        const auto [ids, row, w, src] = unpermute_inputs(tokens, k, 6, hidden, dt, hidden + dt, 7);
        std::vector<uint8_t> out(tokens * hidden * (dt == HAL_DTYPE_F32 ? 4 : 2), 0xEE);
        moe_unpermute(src.data(), row.data(), w.data(), tokens, k, hidden, dt, out.data());
        for (uint64_t t = 0; t < tokens; ++t)
          for (uint64_t j = 0; j < hidden; ++j) {
            double want = 0, mag = 0;
            for (uint32_t c = 0; c < k; ++c) {
              const int64_t r = row[t * k + c];
              if (r < 0) continue;
              const double x = from(src, static_cast<size_t>(r) * hidden + j, dt);
              want += w[t * k + c] * x;
              mag += std::fabs(w[t * k + c] * x);
            }
            const double got = from(out, t * hidden + j, dt);
            // f32 accumulation, then one rounding to the dtype.
            const double ulp = dt == HAL_DTYPE_F32 ? 0x1p-23 : dt == HAL_DTYPE_F16 ? 0x1p-10 : 0x1p-7;
            EXPECT_NEAR(got, want, 1e-6 * mag + ulp * std::fabs(want) + 1e-30)
                << "isa " << static_cast<int>(isa) << " dtype " << dt << " hidden " << hidden << " t " << t;
          }
      }
    }
  }
  reset_isa();
}

TEST(MoeUnpermute, PermuteThenUnpermuteWithEqualWeightsGivesTheTokensBack) {
  const uint64_t tokens = 50, hidden = 64;
  const uint32_t k = 2, experts = 4;
  auto ids = moe::choices(tokens, k, experts, 3);
  for (auto& e : ids) e = e < 0 ? 0 : e;  // nothing dropped here
  for (uint64_t t = 0; t < tokens; ++t)
    if (ids[t * k] == ids[t * k + 1]) ids[t * k + 1] = (ids[t * k] + 1) % experts;
  std::vector<int64_t> row(tokens * k);
  std::vector<uint64_t> off(experts + 1);
  moe_plan(ids.data(), tokens, k, experts, row.data(), off.data());
  std::vector<float> x(tokens * hidden), mid(off[experts] * hidden), back(tokens * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.125f - 3;
  std::vector<float> w(tokens * k, 0.5f);
  moe_permute(x.data(), tokens, hidden, HAL_DTYPE_F32, row.data(), k, mid.data());
  moe_unpermute(mid.data(), row.data(), w.data(), tokens, k, hidden, HAL_DTYPE_F32, back.data());
  EXPECT_EQ(x, back);
  // Every choice dropped: zeros.
  std::fill(row.begin(), row.end(), -1);
  moe_unpermute(mid.data(), row.data(), w.data(), tokens, k, hidden, HAL_DTYPE_F32, back.data());
  EXPECT_EQ(back, std::vector<float>(tokens * hidden, 0.0f));
  EXPECT_THROW(moe_unpermute(mid.data(), row.data(), w.data(), tokens, k, hidden, HAL_DTYPE_I32, back.data()),
               Error);
}

TEST(MoeUnpermute, SplitAcrossTwoBuffersIsBitwiseTheOneBufferSum) {
  // Rows of even experts in one buffer, odd in another (each compacted):
  // the same bits as the one-buffer unpermute, for every ISA and dtype.
  for (Isa isa : isas()) {
    force_isa(isa);
    for (hal_dtype_t dt : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
      const uint64_t tokens = 41, hidden = 300, es = dt == HAL_DTYPE_F32 ? 4 : 2;
      const uint32_t k = 3;
      const auto [ids, row, w, src] = unpermute_inputs(tokens, k, 6, hidden, dt, 11 + dt, 5);
      std::vector<int64_t> ra(tokens * k, -1), rb(tokens * k, -1);
      std::vector<uint8_t> a, b;
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i] < 0) continue;
        auto& to = ids[i] % 2 == 0 ? a : b;
        (ids[i] % 2 == 0 ? ra : rb)[i] = static_cast<int64_t>(to.size() / (hidden * es));
        const auto* r = src.data() + static_cast<size_t>(row[i]) * hidden * es;
        to.insert(to.end(), r, r + hidden * es);
      }
      a.resize(a.size() + 1);  // never empty
      b.resize(b.size() + 1);
      std::vector<uint8_t> one(tokens * hidden * es), two(one.size(), 0xEE);
      moe_unpermute(src.data(), row.data(), w.data(), tokens, k, hidden, dt, one.data());
      moe_unpermute_split(a.data(), ra.data(), b.data(), rb.data(), w.data(), tokens, k, hidden, dt,
                          two.data());
      EXPECT_EQ(one, two) << "isa " << static_cast<int>(isa) << " dtype " << dt;
    }
  }
  reset_isa();
  const std::vector<int64_t> r(2, -1);
  const std::vector<float> w(2, 1.0f);
  std::vector<float> out(4);
  EXPECT_THROW(moe_unpermute_split(out.data(), r.data(), nullptr, nullptr, w.data(), 1, 2, 4, HAL_DTYPE_F32,
                                   out.data()),
               Error);
}

}  // namespace
}  // namespace sigma::kernels
