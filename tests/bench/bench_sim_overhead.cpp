// What the sim vendor's wrapper costs when no fault is active: all-reduce
// through sim (wrapping cpu) against the same all-reduce through cpu, side by
// side in interleaved blocks, 2 processes. Goal: <= 2 % at 64 MiB.
//
//   bench_sim_overhead
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include "two_rank.hpp"

#include <sys/wait.h>

#include <filesystem>
#include <map>

namespace {

struct Path {
  sigma::hal::PluginPtr plugin;
  std::unique_ptr<sigma::bootstrap::HalBootstrap> bootstrap;
  std::unique_ptr<sigma::hal::Communicator> comm;
};
Path g_cpu, g_sim;
const std::vector<int64_t> kSizes = {4, 64 << 10, 4 << 20, 64 << 20};

void connect(Path& p, const std::string& plugin, const std::string& options, int rank,
             const std::shared_ptr<sigma::bootstrap::Store>& store) {
  sigma::hal::LoadOptions lo;
  lo.options = options;
  p.plugin = sigma::hal::Plugin::load(plugin, lo);
  p.bootstrap = std::make_unique<sigma::bootstrap::HalBootstrap>(store, plugin + "/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = static_cast<uint32_t>(rank);
  ca.world_size = 2;
  ca.bootstrap = p.bootstrap->table();
  ca.timeout_ns = 60'000'000'000ull;
  p.comm = std::make_unique<sigma::hal::Communicator>(p.plugin, ca);
}

// An in-place f32 sum all-reduce of `bytes` through one path.
struct Op {
  sigma::hal::Buffer buf;
  hal_coll_args_t args;
  Path& path;
  Op(Path& p, int64_t bytes) : buf(p.plugin, 0, static_cast<uint64_t>(bytes)), args{}, path(p) {
    std::vector<float> ones(static_cast<size_t>(bytes / 4), 1.0f);
    buf.copy_from_host(ones.data(), static_cast<uint64_t>(bytes));
    args = sigma::hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, static_cast<uint64_t>(bytes / 4),
                                 buf.data(), buf.data());
  }
  void operator()() { path.comm->run(args, std::chrono::seconds(120)); }
};

std::map<int64_t, sigma::bench::Interleaved> g_results;  // bytes -> cpu (a), sim (b)

// cpu and sim interleaved (sigma::bench::interleave): 40 blocks of 25 up to
// 64 KiB, 16 blocks of 4 at 4 MiB, 16 of 1 at 64 MiB.
void BM_Interleaved(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Op cpu(g_cpu, bytes), sim(g_sim, bytes);
  const int blocks = bytes <= (64 << 10) ? 40 : 16, ops = bytes <= (64 << 10)  ? 25
                                                          : bytes <= (4 << 20) ? 4
                                                                               : 1;
  sigma::bench::Interleaved r;
  for (auto _ : state) {
    r = sigma::bench::interleave(blocks, ops, cpu, sim);
    state.SetIterationTime(r.b_median * ops * blocks);
  }
  state.counters["cpu_us"] = r.a_median * 1e6;
  state.counters["sim_us"] = r.b_median * 1e6;
  state.counters["sim_cost_pct"] = 100.0 * (r.b_median / r.a_median - 1);
  g_results[bytes] = r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  const int rank = sigma::bench::start_two_ranks(argc, argv, dir);
  benchmark::Initialize(&argc, argv);
  auto store = std::make_shared<sigma::bootstrap::FileStore>(dir + "/store");
  connect(g_cpu, "cpu", "", rank, store);
  connect(g_sim, "sim", "", rank, store);
  for (int64_t bytes : kSizes)
    benchmark::RegisterBenchmark("AllReduce/interleaved", BM_Interleaved)
        ->Arg(bytes)
        ->Iterations(1)
        ->UseManualTime();
  if (rank == 0) {
    benchmark::ConsoleReporter rep;
    benchmark::RunSpecifiedBenchmarks(&rep);
    std::printf("\ninterleaved blocks, us per op (median block)\n%10s %12s %12s %10s\n", "bytes", "cpu",
                "sim", "sim cost");
    for (const auto& [bytes, r] : g_results)
      std::printf("%10lld %12.1f %12.1f %9.1f%%\n", static_cast<long long>(bytes), r.a_median * 1e6,
                  r.b_median * 1e6, 100.0 * (r.b_median / r.a_median - 1));
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  // Both ranks finish their last collective before tearing down.
  g_sim.comm->run(
      [] {
        hal_coll_args_t a{};
        a.struct_size = sizeof(a);
        a.op = HAL_COLL_BARRIER;
        return a;
      }(),
      std::chrono::seconds(60));
  g_sim = Path{};
  g_cpu = Path{};
  std::fflush(stdout);
  if (rank == 0) {
    ::wait(nullptr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
