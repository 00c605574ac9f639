// MoE dispatch and combine on a GPU's memory: the cuda vendor's
// communicator (NCCL, one rank), its kernels extension and its device
// memcpy under Dispatcher::dispatch_on_device / combine_on_device. At one
// rank every row stays home, so the rows must be exactly what the CPU
// permute kernel gives and the outputs what its unpermute gives. Skipped,
// and reported as skipped, without a GPU; tests/device/run.sh runs it.
#include <sigma/bootstrap.hpp>
#include <sigma/kernels.hpp>
#include <sigma/parallel.hpp>

#include "gpu.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

namespace sigma::parallel {
namespace {

TEST(CudaDispatch, OnGpuMemoryTheRowsAndOutputsAreTheCpuKernelsBitForBit) {
  SIGMA_REQUIRE_GPU();
  const hal::PluginPtr cuda = hal::Plugin::load("cuda");
  const std::string dir =
      std::filesystem::temp_directory_path() / ("sigma-cuda-dispatch-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    bootstrap::HalBootstrap boot(std::make_shared<bootstrap::FileStore>(dir), "one/");
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.world_size = 1;
    ca.bootstrap = boot.table();
    ca.timeout_ns = 30'000'000'000ull;
    hal::Communicator comm(cuda, ca);
    constexpr uint32_t kExperts = 8;
    constexpr uint64_t kTokens = 333, kHidden = 257;
    Dispatcher d(comm, 0, 1, {kExperts, Exchange::all_to_all, std::chrono::seconds(30)});
    std::mt19937 rng(7);
    std::normal_distribution<float> n01(0, 1);
    std::vector<float> logits(kTokens * kExperts), x(kTokens * kHidden);
    for (auto& v : logits) v = n01(rng);
    for (auto& v : x) v = n01(rng);
    RouterOptions ro;
    ro.num_experts = kExperts;
    ro.top_k = 2;
    ro.capacity_factor = 1.0;  // some choices dropped
    const Routing r = route(logits.data(), kTokens, ro);
    const Plan plan = d.plan(r);  // the counts go through device buffers
    std::vector<float> want_rows(plan.expert_rows() * kHidden), want_out(x.size());
    kernels::moe_permute(x.data(), kTokens, kHidden, HAL_DTYPE_F32, plan.row_of.data(), 2, want_rows.data());
    std::vector<float> y(want_rows.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = want_rows[i] * 0.5f + 1.0f;  // the "experts"
    kernels::moe_unpermute(y.data(), plan.row_of.data(), r.weights.data(), kTokens, 2, kHidden, HAL_DTYPE_F32,
                           want_out.data());

    hal::Buffer dx(cuda, 0, x.size() * 4), rows(cuda, 0, want_rows.size() * 4 + 4),
        dy(cuda, 0, y.size() * 4 + 4), out(cuda, 0, x.size() * 4);
    dx.copy_from_host(x.data(), x.size() * 4);
    d.dispatch_on_device(plan, dx.data(), kHidden, HAL_DTYPE_F32, rows.data());
    std::vector<float> got_rows(want_rows.size());
    rows.copy_to_host(got_rows.data(), got_rows.size() * 4);
    EXPECT_EQ(0, std::memcmp(got_rows.data(), want_rows.data(), got_rows.size() * 4));
    dy.copy_from_host(y.data(), y.size() * 4);
    d.combine_on_device(plan, dy.data(), r.weights.data(), kHidden, HAL_DTYPE_F32, out.data());
    std::vector<float> got_out(want_out.size());
    out.copy_to_host(got_out.data(), got_out.size() * 4);
    EXPECT_EQ(0, std::memcmp(got_out.data(), want_out.data(), got_out.size() * 4));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sigma::parallel
