// What the guardrails cost per step for 100 M parameters on 2 ranks (two
// processes, cpu vendor): Guardrails::step (one fused scan per buffer + the
// one small all-gather) side by side with a plain read of the same gradient
// bytes (the memory limit, split the same way over oneTBB's threads, both
// ranks at once: lined up by an untimed barrier before each read) and
// with the all-reduce of those gradients that every data-parallel step does
// anyway. The fraction of a sample-trainer step comes once that trainer
// exists; until then the all-reduce is the yardstick.
//
//   bench_guardrails [--benchmark_repetitions=N]
#include <sigma/bootstrap.hpp>
#include <sigma/guardrails.hpp>

#include "two_rank.hpp"

#include <sys/wait.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <filesystem>

namespace {

using namespace sigma;

constexpr uint64_t kParams = 100'000'000;
constexpr int kLayers = 24;  // a transformer's blocks, equal shares

struct Job {
  hal::PluginPtr plugin;
  std::unique_ptr<bootstrap::HalBootstrap> bootstrap;
  std::unique_ptr<hal::Communicator> comm;
  std::unique_ptr<guardrails::Guardrails> guard;
  std::vector<float> grads;
  std::vector<std::vector<guardrails::BufferView>> views;
  int rank = 0;
};
Job g_job;

void BM_ReadLimit(benchmark::State& state) {
  const float* p = g_job.grads.data();
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  for (auto _ : state) {
    // Both ranks read at once, as they scan at once inside the guardrails'
    // step (whose exchange lines them up): a barrier, untimed, first.
    state.PauseTiming();
    hal_coll_args_t barrier{};
    barrier.struct_size = sizeof(barrier);
    barrier.op = HAL_COLL_BARRIER;
    g_job.comm->run(barrier, std::chrono::seconds(60));
    state.ResumeTiming();
    std::vector<float> part((kParams + kPiece - 1) / kPiece);
    tbb::parallel_for(uint64_t{0}, static_cast<uint64_t>(part.size()), [&](uint64_t i) {
      const uint64_t b = i * kPiece, e = std::min(kParams, b + kPiece);
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
      uint64_t j = b;
      for (; j + 8 <= e; j += 8) {
        s0 += p[j];
        s1 += p[j + 1];
        s2 += p[j + 2];
        s3 += p[j + 3];
        s4 += p[j + 4];
        s5 += p[j + 5];
        s6 += p[j + 6];
        s7 += p[j + 7];
      }
      part[i] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    });
    benchmark::DoNotOptimize(part.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams * 4));
}

void BM_GuardrailsStep(benchmark::State& state) {
  uint64_t step = 1;
  for (auto _ : state) {
    const auto d = g_job.guard->step(step++, 2.0, g_job.views);
    if (d.action != guardrails::Action::apply) state.SkipWithError(d.reason.c_str());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams * 4));
}

void BM_GradientAllReduce(benchmark::State& state) {
  hal::Buffer b(g_job.plugin, 0, kParams * 4);
  b.copy_from_host(g_job.grads.data(), kParams * 4);
  hal_coll_args_t a{};
  a.struct_size = sizeof(a);
  a.op = HAL_COLL_ALL_REDUCE;
  a.dtype = HAL_DTYPE_F32;
  a.count = kParams;
  a.sendbuf = a.recvbuf = b.data();
  for (auto _ : state) g_job.comm->run(a, std::chrono::seconds(600));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams * 4));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  const int rank = bench::start_two_ranks(argc, argv, dir);
  benchmark::Initialize(&argc, argv);
  auto store = std::make_shared<bootstrap::FileStore>(dir + "/store");
  g_job.rank = rank;
  g_job.plugin = hal::Plugin::load("cpu");
  g_job.bootstrap = std::make_unique<bootstrap::HalBootstrap>(store, "bench/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = static_cast<uint32_t>(rank);
  ca.world_size = 2;
  ca.bootstrap = g_job.bootstrap->table();
  ca.timeout_ns = 60'000'000'000ull;
  g_job.comm = std::make_unique<hal::Communicator>(g_job.plugin, ca);
  // Gradient-like values (small, both signs), the same on both ranks.
  g_job.grads.resize(kParams);
  for (uint64_t i = 0; i < kParams; ++i)
    g_job.grads[i] = static_cast<float>(static_cast<int>(i * 2654435761u % 2001) - 1000) * 1e-6f;
  std::vector<guardrails::LayerInfo> layers;
  const uint64_t per = kParams / kLayers;
  for (int l = 0; l < kLayers; ++l) {
    layers.push_back({"block" + std::to_string(l), HAL_DTYPE_BF16});
    const uint64_t n = l + 1 == kLayers ? kParams - per * l : per;
    g_job.views.push_back({{g_job.grads.data() + per * l, n, HAL_DTYPE_F32}});
  }
  guardrails::Config cfg;
  cfg.spike.enabled = false;  // a constant loss is not a spike, but keep the figure to scan + exchange
  g_job.guard = std::make_unique<guardrails::Guardrails>(
      cfg, layers, guardrails::Group{g_job.comm.get(), 0, rank, 2, guardrails::GradLayout::replicated});

  benchmark::RegisterBenchmark("ReadLimit/100M_f32", BM_ReadLimit)->Iterations(10)->UseRealTime();
  benchmark::RegisterBenchmark("GuardrailsStep/100M_f32", BM_GuardrailsStep)->Iterations(10)->UseRealTime();
  benchmark::RegisterBenchmark("GradientAllReduce/100M_f32", BM_GradientAllReduce)
      ->Iterations(3)
      ->UseRealTime();
  if (rank == 0) {
    bench::Recorder rec;
    benchmark::RunSpecifiedBenchmarks(&rec);
    auto find = [&](const std::string& prefix) {
      for (const auto& [name, row] : rec.rows)
        if (name.rfind(prefix, 0) == 0) return row.seconds_per_op;
      return 0.0;
    };
    const double read = find("ReadLimit/"), guard = find("GuardrailsStep/"), ar = find("GradientAllReduce/");
    std::printf("\nper step, 100 M f32 gradients per rank, 2 ranks:\n");
    std::printf("  guardrails step  %8.1f ms\n  read limit       %8.1f ms  (guardrails reach %.2f of it)\n",
                guard * 1e3, read * 1e3, guard > 0 ? read / guard : 0.0);
    std::printf("  gradient all-reduce %5.1f ms  (guardrails cost %.1f %% of it)\n", ar * 1e3,
                ar > 0 ? 100.0 * guard / ar : 0.0);
  } else {
    bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  g_job.comm->run(
      [] {
        hal_coll_args_t a{};
        a.struct_size = sizeof(a);
        a.op = HAL_COLL_BARRIER;
        return a;
      }(),
      std::chrono::seconds(60));
  g_job = Job{};
  std::fflush(stdout);
  if (rank == 0) {
    ::wait(nullptr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
