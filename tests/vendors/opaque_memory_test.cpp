// libsigma's engines on device memory the host cannot read: the sim vendor
// with opaque=1 hands out addresses mapped PROT_NONE (a read through one
// kills the process, as the first test shows), so any engine that reached
// into a device pointer instead of going through the HAL would crash here.
// Each engine must give bit-identical results to the same data in host
// memory, through the kernels extension and, with kernels=0, through host
// staging.
#include <sigma/checkpoint.hpp>
#include <sigma/guardrails.hpp>
#include <sigma/hal.hpp>
#include <sigma/kernels.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace sigma {
namespace {

namespace fs = std::filesystem;

hal::PluginPtr sim(const std::string& options) {
  hal::LoadOptions lo;
  lo.options = options;
  return hal::Plugin::load("sim", lo);
}

// A device copy of host floats.
struct Dev {
  hal::Buffer b;
  explicit Dev(const hal::PluginPtr& p, const std::vector<float>& v) : b(p, 0, v.size() * 4) {
    b.copy_from_host(v.data(), v.size() * 4);
  }
  std::vector<float> get() const {
    std::vector<float> v(b.size() / 4);
    b.copy_to_host(v.data(), v.size() * 4);
    return v;
  }
};

std::vector<float> gradients(size_t n, uint32_t seed, bool poison = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 0.05f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  if (poison) v[n / 3] = NAN;
  return v;
}

class OpaqueMemory : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { plugin_ = sim(GetParam()); }
  hal::PluginPtr plugin_;
};

TEST(OpaqueMemoryProof, TheHostCannotReadADevicePointer) {
  {
    auto p = sim("opaque=1");
    EXPECT_FALSE(p->host_addressable(0));
    hal::Buffer b(p, 0, 4096);
    EXPECT_DEATH(
        {
          const volatile uint8_t x = *static_cast<const volatile uint8_t*>(b.data());
          (void)x;
        },
        "");
    // The plugin itself reads it, through its private mapping.
    const uint32_t v = 0xC0FFEE;
    b.copy_from_host(&v, 4);
    uint32_t back = 0;
    b.copy_to_host(&back, 4);
    EXPECT_EQ(back, v);
  }
  EXPECT_TRUE(sim("")->host_addressable(0)) << "without opaque=1 the sim's memory is the host's";
}

TEST_P(OpaqueMemory, GuardrailsDecideExactlyAsOnHostMemory) {
  guardrails::Config c;
  c.clipping.max_norm = 1.0;
  c.spike.enabled = false;
  const std::vector<guardrails::LayerInfo> layers = {{"a", HAL_DTYPE_BF16}, {"b", HAL_DTYPE_BF16}};
  guardrails::Guardrails on_host(c, layers), on_device(c, layers);
  for (uint64_t step = 0; step < 6; ++step) {
    const auto a = gradients(70001, static_cast<uint32_t>(step), step == 3), b = gradients(1023, 100 + step);
    Dev da(plugin_, a), db(plugin_, b);
    const auto h = on_host.step(
        step, 2.5, {{{a.data(), a.size(), HAL_DTYPE_F32}}, {{b.data(), b.size(), HAL_DTYPE_F32}}});
    const auto d = on_device.step(step, 2.5,
                                  {{{da.b.data(), a.size(), HAL_DTYPE_F32, plugin_.get(), 0}},
                                   {{db.b.data(), b.size(), HAL_DTYPE_F32, plugin_.get(), 0}}});
    EXPECT_EQ(guardrails::action_name(d.action), std::string(guardrails::action_name(h.action))) << step;
    EXPECT_EQ(d.global_norm, h.global_norm) << step;
    EXPECT_EQ(d.clip_factor, h.clip_factor) << step;
    EXPECT_EQ(d.non_finite, h.non_finite) << step;
    EXPECT_EQ(d.reason, h.reason) << step;
    EXPECT_EQ(guardrails::fingerprint({{da.b.data(), a.size(), HAL_DTYPE_F32, plugin_.get(), 0}}),
              guardrails::fingerprint({{a.data(), a.size(), HAL_DTYPE_F32}}));
  }
}

TEST_P(OpaqueMemory, ACheckpointSavedFromDeviceMemoryRestoresBitIdentically) {
  const std::string dir = ::testing::TempDir() + "opaque-ckpt-" + std::to_string(::getpid());
  fs::remove_all(dir);
  const auto w = gradients(300007, 1), m = gradients(4099, 2);
  Dev dw(plugin_, w), dm(plugin_, m);
  checkpoint::Options o;
  o.dir = dir;
  o.base_every = 2;
  {
    checkpoint::Engine e(o);
    for (uint64_t step : {10, 20}) {
      checkpoint::Metadata meta;
      meta.step = step;
      e.save({{"w", HAL_DTYPE_F32, {static_cast<int64_t>(w.size())}, dw.b.data(), plugin_.get(), 0},
              {"m", HAL_DTYPE_F32, {static_cast<int64_t>(m.size())}, dm.b.data(), plugin_.get(), 0}},
             meta);
    }
  }
  Dev rw(plugin_, std::vector<float>(w.size(), 0)), rm(plugin_, std::vector<float>(m.size(), 0));
  checkpoint::Engine e(o);
  checkpoint::Metadata meta;
  e.restore({{"w", HAL_DTYPE_F32, {static_cast<int64_t>(w.size())}, rw.b.data(), plugin_.get(), 0},
             {"m", HAL_DTYPE_F32, {static_cast<int64_t>(m.size())}, rm.b.data(), plugin_.get(), 0}},
            &meta);
  EXPECT_EQ(meta.step, 20u);
  EXPECT_EQ(0, std::memcmp(rw.get().data(), w.data(), w.size() * 4));
  EXPECT_EQ(0, std::memcmp(rm.get().data(), m.data(), m.size() * 4));
  // And into host memory, from the same files.
  std::vector<float> hw(w.size()), hm(m.size());
  e.restore({{"w", HAL_DTYPE_F32, {static_cast<int64_t>(w.size())}, hw.data()},
             {"m", HAL_DTYPE_F32, {static_cast<int64_t>(m.size())}, hm.data()}},
            &meta);
  EXPECT_EQ(hw, w);
  EXPECT_EQ(hm, m);
  fs::remove_all(dir);
}

TEST_P(OpaqueMemory, MoePermuteAndUnpermuteMatchTheHostBitForBit) {
  const uint64_t tokens = 301, hidden = 40;
  const uint32_t k = 2, experts = 6;
  std::vector<int32_t> ids(tokens * k);
  for (uint64_t t = 0; t < tokens; ++t) {
    ids[t * k] = static_cast<int32_t>(t % experts);
    ids[t * k + 1] = t % 7 == 0 ? -1 : static_cast<int32_t>((t * 5 + 2) % experts);
  }
  std::vector<int64_t> row(tokens * k);
  std::vector<uint64_t> off(experts + 1);
  kernels::moe_plan(ids.data(), tokens, k, experts, row.data(), off.data());
  const auto x = gradients(tokens * hidden, 9);
  std::vector<float> wt(tokens * k, 0.5f), mid(off[experts] * hidden), back(tokens * hidden);
  kernels::moe_permute(x.data(), tokens, hidden, HAL_DTYPE_F32, row.data(), k, mid.data());
  kernels::moe_unpermute(mid.data(), row.data(), wt.data(), tokens, k, hidden, HAL_DTYPE_F32, back.data());
  const kernels::Place at{plugin_.get(), 0};
  Dev dx(plugin_, x), dw(plugin_, wt), dmid(plugin_, std::vector<float>(mid.size(), 0)),
      dback(plugin_, std::vector<float>(back.size(), 0));
  hal::Buffer drow(plugin_, 0, row.size() * 8);
  drow.copy_from_host(row.data(), row.size() * 8);
  const auto* r = static_cast<const int64_t*>(drow.data());
  kernels::moe_permute(at, dx.b.data(), tokens, hidden, HAL_DTYPE_F32, r, k, off[experts], dmid.b.data());
  EXPECT_EQ(dmid.get(), mid);
  kernels::moe_unpermute(at, dmid.b.data(), off[experts], r, static_cast<const float*>(dw.b.data()), tokens,
                         k, hidden, HAL_DTYPE_F32, dback.b.data());
  EXPECT_EQ(dback.get(), back);
  EXPECT_EQ(kernels::checksum_parallel(at, dx.b.data(), x.size() * 4),
            kernels::checksum_parallel(x.data(), x.size() * 4));
}

// Through the extension, and through host staging (every entry declines).
INSTANTIATE_TEST_SUITE_P(Sim, OpaqueMemory, ::testing::Values("opaque=1", "opaque=1;kernels=0"),
                         [](const auto& info) {
                           return std::string(info.index == 0 ? "Extension" : "Staged");
                         });

}  // namespace
}  // namespace sigma
