// All-reduce and all-to-all through the HAL cpu vendor against raw Gloo with
// the same algorithm, side by side in one run, 2 processes on loopback.
//
//   bench_cpu_collectives [--benchmark_filter=...]
//
// The program starts its peer (rank 1) itself. Both ranks run the same
// benchmarks with fixed iteration counts (collectives need every rank to
// make the same calls); rank 0 reports, then prints the HAL/Gloo ratio of
// bus bandwidth and the latency added per operation, measured in
// interleaved blocks (the figures to quote) and in separate runs per size.
#include <sigma/bootstrap.hpp>
#include <sigma/hal.hpp>

#include "two_rank.hpp"

#include <benchmark/benchmark.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

namespace {

constexpr int kWorld = 2;
int g_rank = 0;
sigma::hal::PluginPtr g_plugin;
std::unique_ptr<sigma::bootstrap::HalBootstrap> g_bootstrap;
std::unique_ptr<sigma::hal::Communicator> g_comm;
std::shared_ptr<gloo::Context> g_gloo;

const std::vector<int64_t> kSizes = {4, 64, 1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20, 256 << 20};

// (op, bytes) -> seconds per operation, HAL (a) and raw Gloo (b), of the
// median and of the best of the interleaved blocks.
std::map<std::pair<std::string, int64_t>, sigma::bench::Interleaved> g_interleaved;

// Same work on both ranks: fewer iterations as messages grow.
int64_t iterations_for(int64_t bytes) {
  if (bytes <= (16 << 10)) return 200;
  if (bytes <= (256 << 10)) return 300;
  if (bytes <= (4 << 20)) return 40;
  if (bytes <= (64 << 20)) return 8;
  return 3;
}

void sum_f32(void* c, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(c);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// Raw Gloo gets memory placed exactly as the cpu vendor places its own
// (2 MiB aligned, transparent huge pages), so the comparison isolates the
// HAL layer rather than page size.
struct HostBuffer {
  float* p = nullptr;
  explicit HostBuffer(int64_t bytes) {
    const size_t align = bytes >= (2 << 20) ? (2 << 20) : 64;
    if (::posix_memalign(reinterpret_cast<void**>(&p), align, static_cast<size_t>(bytes)) != 0)
      throw std::bad_alloc();
    if (bytes >= (2 << 20)) ::madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
    std::fill(p, p + bytes / 4, 1.0f);
  }
  ~HostBuffer() { std::free(p); }
};

struct Buffers {
  sigma::hal::Buffer hal_send, hal_recv;
  HostBuffer gloo_send, gloo_recv;
  size_t count;
  explicit Buffers(int64_t bytes)
      : hal_send(g_plugin, 0, bytes),
        hal_recv(g_plugin, 0, bytes),
        gloo_send(bytes),
        gloo_recv(bytes),
        count(static_cast<size_t>(bytes / 4)) {
    std::vector<float> ones(bytes / 4, 1.0f);
    hal_send.copy_from_host(ones.data(), bytes);
    hal_recv.copy_from_host(ones.data(), bytes);
  }
};

void set_bus_bw(benchmark::State& state, int64_t bytes, double factor) {
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["busbw_GBps"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * bytes * factor * 1e-9, benchmark::Counter::kIsRate);
}

// One in-place f32 sum all-reduce of the buffers, through each path.
void hal_all_reduce(Buffers& b) {
  g_comm->run(sigma::hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, b.count, b.hal_recv.data(),
                                    b.hal_recv.data()),
              std::chrono::seconds(120));
}

void gloo_all_reduce(Buffers& b) {
  gloo::AllreduceOptions o(g_gloo);
  o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  o.setOutput(b.gloo_recv.p, b.count);
  o.setReduceFunction(sum_f32);
  gloo::allreduce(o);
}

void BM_AllReduce_HAL(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffers b(bytes);
  for (auto _ : state) hal_all_reduce(b);
  set_bus_bw(state, bytes, 2.0 * (kWorld - 1) / kWorld);
}

void BM_AllReduce_Gloo(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffers b(bytes);
  for (auto _ : state) gloo_all_reduce(b);
  set_bus_bw(state, bytes, 2.0 * (kWorld - 1) / kWorld);
}

void hal_all_to_all(Buffers& b) {
  hal_coll_args_t a = sigma::hal::coll_args(HAL_COLL_ALL_TO_ALL, HAL_DTYPE_F32, b.count / kWorld,
                                            b.hal_send.data(), b.hal_recv.data());
  g_comm->run(a, std::chrono::seconds(120));
}

void gloo_all_to_all(Buffers& b) {
  gloo::AlltoallOptions o(g_gloo);
  o.setInput(b.gloo_send.p, b.count);
  o.setOutput(b.gloo_recv.p, b.count);
  gloo::alltoall(o);
}

// All-to-all(v) as MoE dispatch uses it, uneven: each rank keeps a quarter
// of its buffer and sends three quarters to the other rank.
std::vector<int64_t> v_counts(size_t count) {
  const auto quarter = static_cast<int64_t>(count / 4), rest = static_cast<int64_t>(count) - quarter;
  return g_rank == 0 ? std::vector<int64_t>{quarter, rest} : std::vector<int64_t>{rest, quarter};
}

void hal_all_to_allv(Buffers& b) {
  const auto c = v_counts(b.count);
  const std::vector<uint64_t> counts(c.begin(), c.end()), displs = {0, counts[0]};
  hal_coll_args_t a =
      sigma::hal::coll_args(HAL_COLL_ALL_TO_ALLV, HAL_DTYPE_F32, 0, b.hal_send.data(), b.hal_recv.data());
  a.send_counts = a.recv_counts = counts.data();
  a.send_displs = a.recv_displs = displs.data();
  g_comm->run(a, std::chrono::seconds(120));
}

void gloo_all_to_allv(Buffers& b) {
  gloo::AlltoallvOptions o(g_gloo);
  o.setInput(b.gloo_send.p, v_counts(b.count));
  o.setOutput(b.gloo_recv.p, v_counts(b.count));
  gloo::alltoallv(o);
}

// Before anything is timed, both paths must give the right answer: each
// op on an odd-sized buffer of rank-dependent values, checked element by
// element on each rank. A wrong result ends the run (exit 1): a fast wrong
// collective is no figure.
float value(int rank, size_t i) { return static_cast<float>(rank * 1000000 + static_cast<int>(i)); }

bool check_outputs() {
  const size_t count = 4 * 1001;  // odd blocks, uneven all-to-all(v) counts
  Buffers b(static_cast<int64_t>(count * 4));
  std::vector<float> send(count), got(count);
  for (size_t i = 0; i < count; ++i) send[i] = value(g_rank, i);
  // What each op must leave in the output, per element.
  auto expected = [&](const std::string& op, size_t i) -> float {
    if (op == "all_reduce") return value(0, i) + value(1, i);
    if (op == "all_to_all") {
      const size_t block = count / kWorld, src = i / block;
      return value(static_cast<int>(src), static_cast<size_t>(g_rank) * block + i % block);
    }
    // all_to_allv: rank r keeps counts(r)[r] and sends counts(r)[1 - r]
    // (v_counts); what it got from source s lies at its displacement for s
    // and came from s's displacement for r.
    const size_t q = count / 4, rest = count - q;
    auto first_count = [&](int rank) { return rank == 0 ? q : rest; };  // counts(rank)[0]
    const int src = i < first_count(g_rank) ? 0 : 1;
    const size_t at = i - (src == 0 ? 0 : first_count(g_rank));
    const size_t src_displ = g_rank == 0 ? 0 : first_count(src);
    return value(src, src_displ + at);
  };
  struct Op {
    const char* name;
    void (*hal)(Buffers&);
    void (*gloo)(Buffers&);
  };
  for (const Op& op :
       {Op{"all_reduce", hal_all_reduce, gloo_all_reduce}, Op{"all_to_all", hal_all_to_all, gloo_all_to_all},
        Op{"all_to_allv", hal_all_to_allv, gloo_all_to_allv}}) {
    const bool in_place = std::string(op.name) == "all_reduce";
    b.hal_send.copy_from_host(send.data(), count * 4);
    b.hal_recv.copy_from_host(send.data(), count * 4);
    std::copy(send.begin(), send.end(), in_place ? b.gloo_recv.p : b.gloo_send.p);
    op.hal(b);
    op.gloo(b);
    b.hal_recv.copy_to_host(got.data(), count * 4);
    for (size_t i = 0; i < count; ++i) {
      const float want = expected(op.name, i);
      if (got[i] != want || b.gloo_recv.p[i] != want) {
        std::fprintf(stderr, "rank %d: %s element %zu: HAL %g, Gloo %g, expected %g\n", g_rank, op.name, i,
                     static_cast<double>(got[i]), static_cast<double>(b.gloo_recv.p[i]),
                     static_cast<double>(want));
        return false;
      }
    }
  }
  return true;
}

// The two paths interleaved (sigma::bench::interleave): small messages in
// 40 blocks of 50, 64 MiB in 16 blocks of 1.
// `label` names the row; with raw Gloo on both sides it measures the noise
// floor of the method itself (an A/A comparison).
void BM_Interleaved(benchmark::State& state, const char* label, void (*Hal)(Buffers&),
                    void (*Gloo)(Buffers&)) {
  const int64_t bytes = state.range(0);
  Buffers b(bytes);
  const int blocks = bytes >= (1 << 20) ? 16 : 40, ops = bytes >= (1 << 20) ? 1 : 50;
  sigma::bench::Interleaved r;
  for (auto _ : state) {
    r = sigma::bench::interleave(
        blocks, ops, [&] { Hal(b); }, [&] { Gloo(b); });
    state.SetIterationTime(r.a_median * ops * blocks);
  }
  state.counters["hal_us"] = r.a_median * 1e6;
  state.counters["gloo_us"] = r.b_median * 1e6;
  state.counters["added_us"] = (r.a_median - r.b_median) * 1e6;
  state.counters["ratio"] = r.a_median > 0 ? r.b_median / r.a_median : 0;
  state.counters["best_added_us"] = (r.a_best - r.b_best) * 1e6;
  g_interleaved[{label, bytes}] = r;
}

void BM_AllToAll_HAL(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffers b(bytes);
  for (auto _ : state) hal_all_to_all(b);
  set_bus_bw(state, bytes, 1.0 * (kWorld - 1) / kWorld);
}

void BM_AllToAll_Gloo(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffers b(bytes);
  for (auto _ : state) gloo_all_to_all(b);
  set_bus_bw(state, bytes, 1.0 * (kWorld - 1) / kWorld);
}

void register_all() {
  for (int64_t bytes : {4, 64, 1024, 64 << 20})
    benchmark::RegisterBenchmark("Interleaved/AllReduce", BM_Interleaved, "AllReduce", hal_all_reduce,
                                 gloo_all_reduce)
        ->Arg(bytes)
        ->Iterations(1)
        ->UseManualTime();
  for (int64_t bytes : {8, 1024, 64 << 20})  // 8 B: one f32 per rank
    benchmark::RegisterBenchmark("Interleaved/AllToAll", BM_Interleaved, "AllToAll", hal_all_to_all,
                                 gloo_all_to_all)
        ->Arg(bytes)
        ->Iterations(1)
        ->UseManualTime();
  for (int64_t bytes : {1024, 64 << 20})
    benchmark::RegisterBenchmark("Interleaved/AllToAllv", BM_Interleaved, "AllToAllv", hal_all_to_allv,
                                 gloo_all_to_allv)
        ->Arg(bytes)
        ->Iterations(1)
        ->UseManualTime();
  // The noise floor: raw Gloo against itself, measured the same way.
  for (int64_t bytes : {4, 64 << 20})
    benchmark::RegisterBenchmark("Interleaved/AllReduce-A/A", BM_Interleaved, "AR Gloo/Gloo", gloo_all_reduce,
                                 gloo_all_reduce)
        ->Arg(bytes)
        ->Iterations(1)
        ->UseManualTime();
  benchmark::RegisterBenchmark("Interleaved/AllToAll-A/A", BM_Interleaved, "A2A Gloo/Gloo", gloo_all_to_all,
                               gloo_all_to_all)
      ->Arg(64 << 20)
      ->Iterations(1)
      ->UseManualTime();
  for (int64_t bytes : kSizes) {
    const int64_t it = iterations_for(bytes);
    benchmark::RegisterBenchmark("AllReduce/HAL", BM_AllReduce_HAL)
        ->Arg(bytes)
        ->Iterations(it)
        ->UseRealTime();
    benchmark::RegisterBenchmark("AllReduce/Gloo", BM_AllReduce_Gloo)
        ->Arg(bytes)
        ->Iterations(it)
        ->UseRealTime();
  }
  for (int64_t bytes : kSizes) {
    if (bytes < 8) continue;  // one element per rank at least
    const int64_t it = iterations_for(bytes);
    benchmark::RegisterBenchmark("AllToAll/HAL", BM_AllToAll_HAL)->Arg(bytes)->Iterations(it)->UseRealTime();
    benchmark::RegisterBenchmark("AllToAll/Gloo", BM_AllToAll_Gloo)
        ->Arg(bytes)
        ->Iterations(it)
        ->UseRealTime();
  }
}

void print_ratios(const sigma::bench::Recorder& rec) {
  if (!g_interleaved.empty()) {
    std::printf(
        "\ninterleaved blocks, us per op (median block; best block); Gloo/Gloo rows: raw Gloo in both "
        "columns, the method's noise floor\n%-14s %10s %10s %10s %12s %8s %10s %10s %12s %8s\n",
        "op", "bytes", "HAL", "Gloo", "added us/op", "ratio", "best HAL", "best Gloo", "added us/op",
        "ratio");
    for (const auto& [key, r] : g_interleaved)
      std::printf("%-14s %10lld %10.1f %10.1f %12.1f %8.3f %10.1f %10.1f %12.1f %8.3f\n", key.first.c_str(),
                  static_cast<long long>(key.second), r.a_median * 1e6, r.b_median * 1e6,
                  (r.a_median - r.b_median) * 1e6, r.a_median > 0 ? r.b_median / r.a_median : 0.0,
                  r.a_best * 1e6, r.b_best * 1e6, (r.a_best - r.b_best) * 1e6,
                  r.a_best > 0 ? r.b_best / r.a_best : 0.0);
  }
  std::printf("\n%-10s %10s %12s %12s %8s %14s\n", "op", "bytes", "HAL GB/s", "Gloo GB/s", "ratio",
              "added us/op");
  for (const char* op : {"AllReduce", "AllToAll"}) {
    for (int64_t bytes : kSizes) {
      const std::string suffix =
          "/" + std::to_string(bytes) + "/iterations:" + std::to_string(iterations_for(bytes)) + "/real_time";
      auto h = rec.rows.find(std::string(op) + "/HAL" + suffix);
      auto g = rec.rows.find(std::string(op) + "/Gloo" + suffix);
      if (h == rec.rows.end() || g == rec.rows.end()) continue;
      std::printf("%-10s %10lld %12.3f %12.3f %8.3f %14.2f\n", op, static_cast<long long>(bytes),
                  h->second.busbw, g->second.busbw,
                  g->second.busbw > 0 ? h->second.busbw / g->second.busbw : 0.0,
                  (h->second.seconds_per_op - g->second.seconds_per_op) * 1e6);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  g_rank = sigma::bench::start_two_ranks(argc, argv, dir);
  benchmark::Initialize(&argc, argv);

  auto store = std::make_shared<sigma::bootstrap::FileStore>(dir + "/hal");
  g_plugin = sigma::hal::Plugin::load("cpu");
  g_bootstrap = std::make_unique<sigma::bootstrap::HalBootstrap>(store, "bench/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = static_cast<uint32_t>(g_rank);
  ca.world_size = kWorld;
  ca.bootstrap = g_bootstrap->table();
  ca.timeout_ns = 60'000'000'000ull;
  g_comm = std::make_unique<sigma::hal::Communicator>(g_plugin, ca);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  std::filesystem::create_directories(dir + "/gloo");
  gloo::rendezvous::FileStore gstore(dir + "/gloo");
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g_rank, kWorld);
  ctx->setTimeout(std::chrono::seconds(120));
  ctx->connectFullMesh(gstore, dev);
  g_gloo = ctx;

  // A wrong result ends both ranks at once (no orderly teardown of a
  // communicator whose results are wrong).
  if (!check_outputs()) std::_Exit(1);
  // Warm both paths up before anything is timed: the first few hundred
  // operations of a fresh process pay for page faults and the peer's start.
  {
    Buffers b(4096);
    for (int i = 0; i < 500; ++i) {
      hal_all_reduce(b);
      gloo_all_reduce(b);
    }
  }
  register_all();
  if (g_rank == 0) {
    sigma::bench::Recorder rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    print_ratios(rec);
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  gloo::BarrierOptions b(g_gloo);
  gloo::barrier(b);
  // Tear down in order, before static destruction: the communicator, then
  // the plugin (which unloads), then the raw Gloo context.
  g_comm.reset();
  g_bootstrap.reset();
  g_plugin.reset();
  g_gloo.reset();
  std::fflush(stdout);
  if (g_rank == 0) {
    ::wait(nullptr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
