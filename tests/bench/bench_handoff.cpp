// Contained recovery's hand-off stream against the wire, side by side in
// one run: a donor (rank 1 here) streams its ~768 MiB of AdamW state
// (adamw_state.hpp) to a rejoining rank (rank 0) through the session's
// HandoffSender / HandoffReceiver (the copy of the state, the sender's
// thread, pieces of at most 16 MiB, landing in the receiver's tensors
// themselves), against the raw transfer of the same bytes over the
// same communicator: one broadcast from one buffer into one buffer, and the
// same in 16 MiB pieces (the faster of the two is the limit). Two
// processes on the HAL `cpu` vendor (the program starts its own peer).
//
//   bench_handoff
//
// A second stream row starts from the memory tier's snapshot of the
// boundary step, as a donor does when the tier snapshots every step.
//
// Reported on rank 0: each path's seconds (medians of 3) and the stream's
// rate as a fraction of the wire's.
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>
#include <sigma/memory_tier.hpp>

#include "adamw_state.hpp"
#include "runtime/handoff_stream.hpp"
#include "two_rank.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::seconds(120);
constexpr uint64_t kPiece = 16ull << 20;

uint32_t g_rank = 0;  // the process: 1 is the donor, 0 the rejoining rank
std::string g_dir;
sigma::hal::PluginPtr g_plugin;
std::unique_ptr<sigma::bootstrap::HalBootstrap> g_bootstrap;
std::shared_ptr<sigma::hal::Communicator> g_comm;  // the donor is its rank 0 (every broadcast's root)

sigma::bench::Model& model() {
  static sigma::bench::Model* m = [] {
    auto* x = new sigma::bench::Model();
    for (int i = 0; i < 2; ++i) x->adamw_step();
    return x;
  }();
  return *m;
}

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Both processes start each timed iteration together.
void barrier() {
  float one = 1;
  sigma::hal::HostStaging staging(g_plugin);
  staging.all_reduce(*g_comm, &one, 1, HAL_DTYPE_F32, HAL_REDUCE_SUM, kTimeout);
}

void BM_HandoffStream(benchmark::State& state) {
  sigma::bench::Model& md = model();
  for (auto _ : state) {
    barrier();
    const auto t0 = Clock::now();
    if (g_rank == 1) {
      sigma::runtime::HandoffSender sender(g_comm, g_plugin, md.views(), kTimeout);
      sender.finish();
    } else {
      sigma::runtime::HandoffReceiver receiver(g_comm, g_plugin, kTimeout);
      receiver.state(md.views());
    }
    state.SetIterationTime(seconds(t0));
  }
}

// What a donor does when the memory tier snapshotted the boundary step
// (every step by default): the snapshot, taken before the clock starts as
// every step takes it, is streamed as it lies, not copied again.
void BM_HandoffFromSnapshot(benchmark::State& state) {
  sigma::bench::Model& md = model();
  sigma::checkpoint::MemoryTier tier({.keep = 1});
  std::unique_ptr<sigma::hal::Communicator> alone;
  if (g_rank == 1) {
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.world_size = 1;
    alone = std::make_unique<sigma::hal::Communicator>(g_plugin, ca);
  }
  uint64_t index = 0;
  for (auto _ : state) {
    if (alone) tier.snapshot(++index, md.views(), *alone, 0, 1);
    barrier();
    const auto t0 = Clock::now();
    if (g_rank == 1) {
      sigma::runtime::HandoffSender sender(g_comm, g_plugin, tier.own_image(index), md.views(), kTimeout);
      sender.finish();
    } else {
      sigma::runtime::HandoffReceiver receiver(g_comm, g_plugin, kTimeout);
      receiver.state(md.views());
    }
    state.SetIterationTime(seconds(t0));
  }
}

// One broadcast of the whole state from one buffer into one buffer.
void BM_RawBroadcast(benchmark::State& state) {
  const uint64_t bytes = model().bytes();
  sigma::hal::Buffer buf(g_plugin, 0, bytes);
  for (auto _ : state) {
    barrier();
    const auto t0 = Clock::now();
    g_comm->run(sigma::hal::coll_args(HAL_COLL_BROADCAST, HAL_DTYPE_U8, bytes, buf.data(), buf.data()),
                kTimeout);
    state.SetIterationTime(seconds(t0));
  }
}

// The same bytes in 16 MiB pieces, all posted at once and then waited for.
void BM_RawBroadcastPieces(benchmark::State& state) {
  const uint64_t bytes = model().bytes();
  sigma::hal::Buffer buf(g_plugin, 0, bytes);
  auto* base = static_cast<uint8_t*>(buf.data());
  for (auto _ : state) {
    barrier();
    const auto t0 = Clock::now();
    std::vector<sigma::hal::Request> pieces;
    for (uint64_t at = 0; at < bytes; at += kPiece) {
      const uint64_t n = std::min(kPiece, bytes - at);
      pieces.push_back(
          g_comm->post(sigma::hal::coll_args(HAL_COLL_BROADCAST, HAL_DTYPE_U8, n, base + at, base + at)));
    }
    for (auto& r : pieces)
      if (!r.wait(kTimeout)) state.SkipWithError("a piece did not arrive");
    state.SetIterationTime(seconds(t0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_rank = static_cast<uint32_t>(sigma::bench::start_two_ranks(argc, argv, g_dir));
  benchmark::Initialize(&argc, argv);
  model();  // both ranks build their state before anything is timed
  auto store = std::make_shared<sigma::bootstrap::FileStore>(g_dir + "/hal");
  g_plugin = sigma::hal::Plugin::load(SIGMA_HAL_CPU_PLUGIN);
  g_bootstrap = std::make_unique<sigma::bootstrap::HalBootstrap>(store, "bench/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = 1 - g_rank;
  ca.world_size = 2;
  ca.bootstrap = g_bootstrap->table();
  ca.timeout_ns = 300'000'000'000ull;
  g_comm = std::make_shared<sigma::hal::Communicator>(g_plugin, ca);
  using Bench = void (*)(benchmark::State&);
  const std::pair<const char*, Bench> benches[] = {{"Handoff/stream_state", BM_HandoffStream},
                                                   {"Handoff/stream_snapshot", BM_HandoffFromSnapshot},
                                                   {"Raw/broadcast", BM_RawBroadcast},
                                                   {"Raw/broadcast_pieces", BM_RawBroadcastPieces}};
  for (const auto& [name, fn] : benches) {
    benchmark::RegisterBenchmark(name, fn)
        ->Iterations(1)
        ->Repetitions(3)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  if (g_rank == 0) {
    sigma::bench::MedianSeconds rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    auto f = [&](const char* k) { return rec.s.count(k) ? rec.s[k] : NAN; };
    const double bytes = static_cast<double>(model().bytes());
    const double stream = f("Handoff/stream_state"), from_snapshot = f("Handoff/stream_snapshot");
    const double wire = std::fmin(f("Raw/broadcast"), f("Raw/broadcast_pieces"));
    std::printf(
        "\nstate: %.0f MiB, 2 ranks on loopback (medians of 3)\n"
        "hand-off stream (copy on the donor, sender thread, landing in the tensors): %.3f s (%.2f GB/s)\n"
        "raw broadcast of the same bytes over the same communicator: %.3f s (one message %.3f s, 16 MiB "
        "pieces %.3f s)\n"
        "the stream moves the state at %.2f of the wire's rate\n"
        "hand-off stream from the memory tier's snapshot of the boundary (no copy on the donor): %.3f s "
        "(%.2f GB/s), %.2f of the wire's rate\n",
        bytes / (1 << 20), stream, bytes / stream / 1e9, wire, f("Raw/broadcast"), f("Raw/broadcast_pieces"),
        wire / stream, from_snapshot, bytes / from_snapshot / 1e9, wire / from_snapshot);
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  g_comm.reset();
  g_bootstrap.reset();
  g_plugin.reset();
  std::fflush(stdout);
  return 0;
}
