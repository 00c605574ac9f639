// The memory tier (each rank's snapshot in host memory, a replica held by
// its ring neighbour, exchanged through the HAL `cpu` vendor) against its
// limits and libtorch, side by side in one run. Two processes (the program
// starts its own peer); ~768 MiB of AdamW state each (adamw_state.hpp).
//
//   bench_memory_tier
//
// Reported on rank 0:
//   snapshot: copy + ring exchange, per snapshot, and of it what the caller
//     waits for (the exchange itself runs on behind the next steps)
//   restore from the peer's replica: rank 1 sends rank 0's state back, rank
//     0 restores it into its tensors (what a replacement process gets),
//     against the raw transfer of the same bytes over the same communicator
//     (the faster of one send of one buffer into one buffer and the same
//     bytes in 16 MiB pieces posted at once: the wire's limit here)
//   restore from its own snapshot (what a surviving rank does), against a
//     memcpy of the same bytes into the same tensors
//   torch::load, then copy_ into the training's tensors as the tier restores
//     into them: from a file in a warm page cache, from the file's bytes
//     already in memory (read where they are: no disk, no page cache), and
//     from a cold file (page cache dropped after save + fsync), beside a
//     cold raw read of the same bytes (the disk limit)
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
#include <cstring>
#include <filesystem>
#include <fstream>
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
    g_tier->handoff(index, {{1, 0, 0}}, md.views(), *g_comm, g_rank);
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

// The same bytes as one buffer, rank 1 to rank 0, over the communicator
// the tier uses: what a restore from the peer would take with no framing,
// no size exchange and no copy into the tensors.
void BM_RawPeerTransfer(benchmark::State& state) {
  const uint64_t bytes = model().bytes();
  sigma::hal::Buffer buf(g_plugin, 0, bytes);
  uint64_t at = 0;
  for (const auto& v : model().views()) {
    buf.copy_from_host(v.data, v.bytes(), at);
    at += v.bytes();
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const auto op = g_rank == 1 ? HAL_COLL_SEND : HAL_COLL_RECV;
    g_comm->run(sigma::hal::coll_args(op, HAL_DTYPE_U8, bytes, g_rank == 1 ? buf.data() : nullptr,
                                      g_rank == 0 ? buf.data() : nullptr, HAL_REDUCE_SUM, 1 - g_rank),
                std::chrono::seconds(60));
    state.SetIterationTime(seconds(t0));
  }
}

// The same bytes in 16 MiB pieces, all posted at once and then waited for:
// the wire's other form (one message is not always the faster on
// loopback Gloo); the faster of the two is the limit.
void BM_RawPeerTransferPieces(benchmark::State& state) {
  constexpr uint64_t kPiece = 16ull << 20;
  const uint64_t bytes = model().bytes();
  sigma::hal::Buffer buf(g_plugin, 0, bytes);
  auto* base = static_cast<uint8_t*>(buf.data());
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::vector<sigma::hal::Request> pieces;
    for (uint64_t at = 0; at < bytes; at += kPiece) {
      const uint64_t n = std::min(kPiece, bytes - at);
      const auto op = g_rank == 1 ? HAL_COLL_SEND : HAL_COLL_RECV;
      pieces.push_back(
          g_comm->post(sigma::hal::coll_args(op, HAL_DTYPE_U8, n, g_rank == 1 ? base + at : nullptr,
                                             g_rank == 0 ? base + at : nullptr, HAL_REDUCE_SUM, 1 - g_rank)));
    }
    for (auto& r : pieces)
      if (!r.wait(std::chrono::seconds(60))) state.SkipWithError("a piece did not arrive");
    state.SetIterationTime(seconds(t0));
  }
}

// The same bytes copied from one place in memory into the training's
// tensors: a restore from its own snapshot's limit.
void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> from;  // the state's own bytes: the copy leaves it as it was
  for (const auto& v : model().views()) {
    const auto* p = static_cast<const uint8_t*>(v.data);
    from.insert(from.end(), p, p + v.bytes());
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const uint8_t* at = from.data();
    for (const auto& v : model().views()) {
      std::memcpy(v.data, at, v.bytes());
      at += v.bytes();
    }
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
// thread count as the tier's side. `from`: "cold" (page cache dropped),
// "warm" (the file read once before, so it is in the page cache) or
// "memory" (the file's bytes in memory, read in place by torch::load's
// (data, size) form).
enum class From { cold, warm, memory };

void BM_TorchLoad(benchmark::State& state, From from) {
  torch::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<torch::Tensor> ts;
  for (auto& v : model().views()) ts.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  const std::string path = g_dir + "/torch.pt";
  torch::save(ts, path);
  std::string bytes;
  if (from == From::memory) {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  sigma::bench::Model target = model();
  std::vector<torch::Tensor> into;
  for (auto& v : target.views()) into.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  std::vector<torch::Tensor> back;
  if (from == From::warm) torch::load(back, path);  // into the page cache
  for (auto _ : state) {
    if (from == From::cold) drop_cache(path);
    back.clear();
    const auto t0 = Clock::now();
    if (from == From::memory) {
      torch::load(back, bytes.data(), bytes.size());  // its reader over the bytes: no stream, no copy
    } else {
      torch::load(back, path);
    }
    for (size_t i = 0; i < back.size(); ++i) into[i].copy_(back[i]);
    state.SetIterationTime(seconds(t0));
  }
  // What was timed is the state: it came back bit-exactly.
  for (size_t i = 0; i < into.size(); ++i)
    if (!torch::equal(into[i], ts[i])) state.SkipWithError("torch::load gave other values");
  std::filesystem::remove(path);
}
#endif

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
  reg("Raw/peer_transfer", BM_RawPeerTransfer, 1);
  reg("Raw/peer_transfer_pieces", BM_RawPeerTransferPieces, 1);
  if (g_rank == 0) {
    reg("MemoryTier/restore_own_snapshot", BM_RestoreOwn, 1);
    reg("Raw/memcpy", BM_Memcpy, 1);
    reg("Disk/cold_raw_read", BM_ColdRawRead, 1);
#ifdef SIGMA_BENCH_WITH_TORCH
    auto torch_load = [&](const char* name, From from) {
      benchmark::RegisterBenchmark(name, [from](benchmark::State& st) { BM_TorchLoad(st, from); })
          ->Iterations(1)
          ->Repetitions(3)
          ->ReportAggregatesOnly(true)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    };
    torch_load("Torch/load_memory", From::memory);
    torch_load("Torch/load_warm", From::warm);
    torch_load("Torch/load_cold", From::cold);
#endif
    sigma::bench::MedianSeconds rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    const double bytes = static_cast<double>(model().bytes());
    auto f = [&](const char* k) { return rec.s.count(k) ? rec.s[k] : NAN; };
    std::printf("\nstate: %.0f MiB per rank, 2 ranks on loopback (medians of 3)\n", bytes / (1 << 20));
    const double peer = f("MemoryTier/restore_from_peer_replica"), own = f("MemoryTier/restore_own_snapshot");
    std::printf("snapshot (copy + ring exchange): %.3f s steady, %.3f s the first (fresh memory)\n",
                f("MemoryTier/snapshot"), first_s);
    std::printf("  of which the caller waits (copy, sizes, posting): %.3f s\n",
                f("MemoryTier/snapshot:returns_s"));
    const double one = f("Raw/peer_transfer"), pieces = f("Raw/peer_transfer_pieces");
    const double wire = std::fmin(one, pieces), copy = f("Raw/memcpy");
    std::printf(
        "restore from the peer's replica: %.3f s (%.2f GB/s); the raw transfer of the same bytes over the "
        "same communicator %.3f s (one message %.3f s, 16 MiB pieces %.3f s): the restore takes %.2fx the "
        "wire's time, %.2f of its rate\n",
        peer, bytes / peer / 1e9, wire, one, pieces, peer / wire, wire / peer);
    std::printf(
        "restore from its own snapshot:   %.3f s (%.2f GB/s); a memcpy into the same tensors %.3f s: "
        "%.2fx the memcpy's time\n",
        own, bytes / own / 1e9, copy, own / copy);
    std::printf("cold raw read of the same bytes: %.3f s; peer replica is %.2fx faster\n",
                f("Disk/cold_raw_read"), f("Disk/cold_raw_read") / peer);
#ifdef SIGMA_BENCH_WITH_TORCH
    for (const char* k : {"memory", "warm", "cold"}) {
      const double tl = f((std::string("Torch/load_") + k).c_str());
      std::printf(
          "torch::load + copy_ into the tensors, %-6s: %.3f s; / restore from the peer's replica "
          "%.2f, / from its own snapshot %.2f\n",
          k, tl, tl / peer, tl / own);
    }
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
