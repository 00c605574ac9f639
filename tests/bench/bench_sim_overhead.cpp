// What the sim vendor's wrapper costs when no fault is active: all-reduce
// through sim (wrapping cpu) against the same all-reduce through cpu, side by
// side, 2 processes. Goal: <= 2 % at 64 MiB.
//
//   bench_sim_overhead [--benchmark_repetitions=N]
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include "two_rank.hpp"

#include <sys/wait.h>

#include <filesystem>

namespace {

struct Path {
  sigma::hal::PluginPtr plugin;
  std::unique_ptr<sigma::bootstrap::HalBootstrap> bootstrap;
  std::unique_ptr<sigma::hal::Communicator> comm;
};
Path g_cpu, g_sim;
const std::vector<int64_t> kSizes = {4, 64 << 10, 4 << 20, 64 << 20};

int64_t iterations_for(int64_t bytes) { return bytes <= (64 << 10) ? 300 : bytes <= (4 << 20) ? 40 : 8; }

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

void all_reduce(benchmark::State& state, Path& p) {
  const int64_t bytes = state.range(0);
  sigma::hal::Buffer b(p.plugin, 0, static_cast<uint64_t>(bytes));
  std::vector<float> ones(static_cast<size_t>(bytes / 4), 1.0f);
  b.copy_from_host(ones.data(), static_cast<uint64_t>(bytes));
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = HAL_COLL_ALL_REDUCE;
  a.dtype = HAL_DTYPE_F32;
  a.count = static_cast<uint64_t>(bytes / 4);
  a.sendbuf = a.recvbuf = b.data();
  for (auto _ : state) p.comm->run(a, std::chrono::seconds(120));
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["busbw_GBps"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * bytes * 1e-9, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  const int rank = sigma::bench::start_two_ranks(argc, argv, dir);
  benchmark::Initialize(&argc, argv);
  auto store = std::make_shared<sigma::bootstrap::FileStore>(dir + "/store");
  connect(g_cpu, "cpu", "", rank, store);
  connect(g_sim, "sim", "", rank, store);
  for (int64_t bytes : kSizes) {
    const int64_t it = iterations_for(bytes);
    // Order alternates with size, so neither path always runs first.
    auto cpu = [](benchmark::State& s) { all_reduce(s, g_cpu); };
    auto sim = [](benchmark::State& s) { all_reduce(s, g_sim); };
    const bool sim_first = (&bytes - &kSizes[0]) % 2 == 1;
    benchmark::RegisterBenchmark(sim_first ? "AllReduce/sim" : "AllReduce/cpu", sim_first ? +sim : +cpu)
        ->Arg(bytes)->Iterations(it)->UseRealTime();
    benchmark::RegisterBenchmark(sim_first ? "AllReduce/cpu" : "AllReduce/sim", sim_first ? +cpu : +sim)
        ->Arg(bytes)->Iterations(it)->UseRealTime();
  }
  if (rank == 0) {
    sigma::bench::Recorder rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    std::printf("\n%10s %12s %12s %10s\n", "bytes", "cpu us/op", "sim us/op", "sim cost");
    for (int64_t bytes : kSizes) {
      const std::string suffix = "/" + std::to_string(bytes) + "/iterations:" + std::to_string(iterations_for(bytes)) + "/real_time";
      auto c = rec.rows.find("AllReduce/cpu" + suffix), s = rec.rows.find("AllReduce/sim" + suffix);
      if (c == rec.rows.end() || s == rec.rows.end()) continue;
      std::printf("%10lld %12.1f %12.1f %9.1f%%\n", static_cast<long long>(bytes), c->second.seconds_per_op * 1e6,
                  s->second.seconds_per_op * 1e6, 100.0 * (s->second.seconds_per_op / c->second.seconds_per_op - 1));
    }
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  // Both ranks finish their last collective before tearing down.
  g_sim.comm->run([] {
    hal_coll_args_t a{};
    a.struct_size = sizeof(a);
    a.op = HAL_COLL_BARRIER;
    return a;
  }(), std::chrono::seconds(60));
  g_sim = Path{};
  g_cpu = Path{};
  std::fflush(stdout);
  if (rank == 0) {
    ::wait(nullptr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
