// The memory tier (each rank's snapshot in host memory, a replica held by
// its ring neighbour, exchanged through the HAL `cpu` vendor) against a cold
// torch::load of the same state, side by side in one run. Two processes
// (the program starts its own peer); ~768 MiB of AdamW state each
// (adamw_state.hpp).
//
//   bench_memory_tier
//
// Reported on rank 0:
//   snapshot: copy + ring exchange, per snapshot, and of it what the caller
//     waits for (the exchange itself runs on behind the next steps)
//   restore from the peer's replica: rank 1 sends rank 0's state back, rank
//     0 restores it into its tensors (what a replacement process gets)
//   restore from its own snapshot (what a surviving rank does)
//   torch::load from a cold file (page cache dropped after save + fsync)
//     then copy_ into the training's tensors, as the tier restores into
//     them, and a cold raw read of the same bytes (the disk limit)
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>
#include <sigma/memory_tier.hpp>

#include "adamw_state.hpp"
#include "two_rank.hpp"

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef SIGMA_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kWorld = 2;

uint32_t g_rank = 0;
std::string g_dir;
sigma::hal::PluginPtr g_plugin;
std::unique_ptr<sigma::bootstrap::HalBootstrap> g_bootstrap;
std::unique_ptr<sigma::hal::Communicator> g_comm;
std::unique_ptr<sigma::checkpoint::MemoryTier> g_tier;

sigma::bench::Model& model() {
  static sigma::bench::Model* m = [] {
    auto* x = new sigma::bench::Model();
    for (int i = 0; i < 5; ++i) x->adamw_step();
    return x;
  }();
  return *m;
}

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using sigma::bench::drop_cache;

void BM_Snapshot(benchmark::State& state) {
  uint64_t index = 0;
  double returned_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    g_tier->snapshot(++index, model().views(), *g_comm, g_rank, kWorld);
    returned_s += seconds(t0);  // what the step waits: the ring exchange runs on behind it
    g_tier->flush();
    state.SetIterationTime(seconds(t0));
  }
  state.counters["returns_s"] = benchmark::Counter(returned_s, benchmark::Counter::kAvgIterations);
}

void BM_RestoreFromPeer(benchmark::State& state) {
  const uint64_t index = g_tier->own_indices().back();
  sigma::bench::Model& md = model();
  for (auto _ : state) {
    // Rank 1 holds rank 0's replica; rank 0 plays the replacement process.
    const auto t0 = Clock::now();
    g_tier->handoff(index, {{1, 0}}, md.views(), *g_comm, g_rank);
    state.SetIterationTime(seconds(t0));
  }
}

void BM_RestoreOwn(benchmark::State& state) {
  const uint64_t index = g_tier->own_indices().back();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!g_tier->restore_own(index, model().views())) state.SkipWithError("no own snapshot");
    state.SetIterationTime(seconds(t0));
  }
}

void BM_ColdRawRead(benchmark::State& state) {
  sigma::bench::Model& md = model();
  const std::string path = g_dir + "/raw.bin";
  if (!sigma::bench::write_raw(md, path)) state.SkipWithError("write");
  std::vector<char> buf(64 << 20);
  for (auto _ : state) {
    drop_cache(path);
    const auto t0 = Clock::now();
    const int fd = ::open(path.c_str(), O_RDONLY);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
    state.SetIterationTime(seconds(t0));
  }
  std::filesystem::remove(path);
}

#ifdef SIGMA_BENCH_WITH_TORCH
// Like the tier's restores, into the training's own (touched) tensors:
// torch::load, then copy_ into them, as load_state_dict does; the same
// thread count as the tier's side.
void BM_TorchLoadCold(benchmark::State& state) {
  torch::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<torch::Tensor> ts;
  for (auto& v : model().views()) ts.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  const std::string path = g_dir + "/torch.pt";
  torch::save(ts, path);
  sigma::bench::Model target = model();
  std::vector<torch::Tensor> into;
  for (auto& v : target.views()) into.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  for (auto _ : state) {
    drop_cache(path);
    std::vector<torch::Tensor> back;
    const auto t0 = Clock::now();
    torch::load(back, path);
    for (size_t i = 0; i < back.size(); ++i) into[i].copy_(back[i]);
    state.SetIterationTime(seconds(t0));
  }
  std::filesystem::remove(path);
}
#endif

// Keeps each benchmark's median seconds for the ratio lines.
class Recorder : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> s;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      std::string name = r.benchmark_name();
      name = name.substr(0, name.find("/iterations"));
      s[name] = r.GetAdjustedRealTime() * 1e-3;  // ms -> s
      for (const auto& [counter, c] : r.counters) s[name + ":" + counter] = c.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  g_rank = static_cast<uint32_t>(sigma::bench::start_two_ranks(argc, argv, g_dir));
  benchmark::Initialize(&argc, argv);
  model();  // both ranks build their state before anything is timed

  auto store = std::make_shared<sigma::bootstrap::FileStore>(g_dir + "/hal");
  g_plugin = sigma::hal::Plugin::load("cpu");
  g_bootstrap = std::make_unique<sigma::bootstrap::HalBootstrap>(store, "bench/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = g_rank;
  ca.world_size = kWorld;
  ca.bootstrap = g_bootstrap->table();
  ca.timeout_ns = 300'000'000'000ull;
  g_comm = std::make_unique<sigma::hal::Communicator>(g_plugin, ca);
  g_tier = std::make_unique<sigma::checkpoint::MemoryTier>();
  // A training loop snapshots again and again into reused buffers; the
  // first snapshots pay for fresh memory (page faults). Timed apart.
  double first_s = 0;
  for (uint64_t i = 1000; i < 1004; ++i) {
    const auto t0 = Clock::now();
    g_tier->snapshot(i, model().views(), *g_comm, g_rank, kWorld);
    g_tier->flush();
    if (i == 1000) first_s = seconds(t0);
  }

  auto reg = [](const char* name, void (*fn)(benchmark::State&), int iterations) {
    benchmark::RegisterBenchmark(name, fn)
        ->Iterations(iterations)
        ->Repetitions(3)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  };
  // The collective ones run on both ranks, in the same order.
  reg("MemoryTier/snapshot", BM_Snapshot, 1);
  reg("MemoryTier/restore_from_peer_replica", BM_RestoreFromPeer, 1);
  if (g_rank == 0) {
    reg("MemoryTier/restore_own_snapshot", BM_RestoreOwn, 1);
    reg("Disk/cold_raw_read", BM_ColdRawRead, 1);
#ifdef SIGMA_BENCH_WITH_TORCH
    reg("Torch/load_cold", BM_TorchLoadCold, 1);
#endif
    Recorder rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    const double bytes = static_cast<double>(model().bytes());
    auto f = [&](const char* k) { return rec.s.count(k) ? rec.s[k] : NAN; };
    std::printf("\nstate: %.0f MiB per rank, 2 ranks on loopback (medians of 3)\n", bytes / (1 << 20));
    const double peer = f("MemoryTier/restore_from_peer_replica"), own = f("MemoryTier/restore_own_snapshot");
    std::printf("snapshot (copy + ring exchange): %.3f s steady, %.3f s the first (fresh memory)\n",
                f("MemoryTier/snapshot"), first_s);
    std::printf("  of which the caller waits (copy, sizes, posting): %.3f s\n",
                f("MemoryTier/snapshot:returns_s"));
    std::printf("restore from the peer's replica: %.3f s (%.2f GB/s)\n", peer, bytes / peer / 1e9);
    std::printf("restore from its own snapshot:   %.3f s (%.2f GB/s)\n", own, bytes / own / 1e9);
    std::printf("cold raw read of the same bytes: %.3f s; peer replica is %.2fx faster\n",
                f("Disk/cold_raw_read"), f("Disk/cold_raw_read") / peer);
#ifdef SIGMA_BENCH_WITH_TORCH
    const double tl = f("Torch/load_cold");
    std::printf(
        "torch::load + copy_ into the tensors, cold: %.3f s; restore from the peer's replica is %.2fx "
        "faster, "
        "from its own snapshot "
        "%.2fx\n",
        tl, tl / peer, tl / own);
#endif
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  g_tier.reset();
  g_comm.reset();
  g_bootstrap.reset();
  g_plugin.reset();
  std::fflush(stdout);
  if (g_rank == 0) {
    ::wait(nullptr);
    std::filesystem::remove_all(g_dir);
  }
  return 0;
}
