// The checkpoint engine against the disk and (where libtorch is built in)
// against torch::save / torch::load, side by side in one run, on ~768 MiB of
// state: fp32 weights of a transformer's shapes plus AdamW's two moments,
// their values produced by real AdamW steps (synthetic gradients, real
// optimiser arithmetic), not random bits.
//
//   bench_checkpoint [--dir DIR] [--zstd-level N] [--benchmark_filter=...]
//
// Reported (one iteration each, the figures that matter printed at the end):
//   disk limit: write + fsync of the raw bytes, and a cold read of them
//   save (base): raw bytes persisted per second, fsync included, / the limit
//   save_async: time the caller is blocked; torch::save + fsync for comparison
//   restore from a cold file (page cache dropped) / a cold raw read; torch::load
//   differential after 1 and 10 AdamW steps: stored / raw bytes
#include <sigma/checkpoint.hpp>

#include "adamw_state.hpp"

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef SIGMA_BENCH_WITH_TORCH
#include <torch/torch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

namespace {

namespace ck = sigma::checkpoint;
using Clock = std::chrono::steady_clock;

std::string g_dir = "build/bench-checkpoint";
int g_level = ck::Options{}.zstd_level;
std::map<std::string, double> g_fig;

using sigma::bench::Model;

Model& model() {
  static Model* m = [] {
    auto* x = new Model();
    for (int i = 0; i < 5; ++i) x->adamw_step();  // moments that are not zeros
    return x;
  }();
  return *m;
}

using sigma::bench::drop_cache;

void drop_tree(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) drop_cache(e.path().string());
}

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void BM_DiskLimit(benchmark::State& state) {
  Model& md = model();
  const std::string path = g_dir + "/raw.bin";
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!sigma::bench::write_raw(md, path)) state.SkipWithError("write");
    g_fig["disk_write_s"] = seconds(t0);
    state.SetIterationTime(g_fig["disk_write_s"]);
    drop_cache(path);
    std::vector<char> buf(64 << 20);
    const auto t1 = Clock::now();
    const int rfd = ::open(path.c_str(), O_RDONLY);
    while (::read(rfd, buf.data(), buf.size()) > 0) {
    }
    ::close(rfd);
    g_fig["disk_read_cold_s"] = seconds(t1);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(md.bytes()));
}

void BM_SigmaSaveBase(benchmark::State& state) {
  Model& md = model();
  for (auto _ : state) {
    std::filesystem::remove_all(g_dir + "/sigma");
    ck::Options o;
    o.dir = g_dir + "/sigma";
    o.base_every = 100;
    o.zstd_level = g_level;
    ck::Engine e(o);
    const auto t0 = Clock::now();
    const ck::SaveResult r = e.save(md.views(), ck::Metadata{});
    g_fig["sigma_save_s"] = seconds(t0);
    g_fig["sigma_base_ratio"] = static_cast<double>(r.stored_bytes) / static_cast<double>(r.raw_bytes);
    state.SetIterationTime(g_fig["sigma_save_s"]);
    // Differential after 1 and 10 AdamW steps, against that base.
    Model copy = md;
    copy.adamw_step();
    ck::Metadata meta;
    meta.step = 1;
    const ck::SaveResult d1 = e.save(copy.views(), meta);
    g_fig["delta1_ratio"] = static_cast<double>(d1.stored_bytes) / static_cast<double>(d1.raw_bytes);
    // ...by kind of tensor: weights, first moments, second moments.
    double kind_raw[3] = {0, 0, 0}, kind_stored[3] = {0, 0, 0};
    for (const auto& t : ck::inspect(d1.path).tensors) {
      const auto ends = [&](const std::string& x) {
        return t.name.size() > x.size() && t.name.compare(t.name.size() - x.size(), x.size(), x) == 0;
      };
      const int kind = ends(".exp_avg") ? 1 : ends(".exp_avg_sq") ? 2 : 0;
      kind_raw[kind] += static_cast<double>(t.bytes);
      kind_stored[kind] += static_cast<double>(t.stored_bytes);
    }
    g_fig["delta1_w"] = kind_stored[0] / kind_raw[0];
    g_fig["delta1_m"] = kind_stored[1] / kind_raw[1];
    g_fig["delta1_v"] = kind_stored[2] / kind_raw[2];
    for (int i = 0; i < 9; ++i) copy.adamw_step();
    meta.step = 10;
    const ck::SaveResult d10 = e.save(copy.views(), meta);
    g_fig["delta10_ratio"] = static_cast<double>(d10.stored_bytes) / static_cast<double>(d10.raw_bytes);
    // Restore of the base from a cold page cache.
    std::filesystem::remove_all(g_dir + "/sigma/job/step-00000000000000000001");
    std::filesystem::remove_all(g_dir + "/sigma/job/step-00000000000000000010");
    drop_tree(g_dir + "/sigma");
    Model target = md;
    const auto t1 = Clock::now();
    e.restore(target.views(), nullptr);
    g_fig["sigma_restore_cold_s"] = seconds(t1);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(md.bytes()));
}

// An engine in a fresh folder below g_dir that has saved twice: the first
// snapshots pay for fresh staging memory (the first one's buffers become
// the in-memory base); a training loop's later ones reuse it, so the
// figures are of the third save.
std::unique_ptr<ck::Engine> warm_engine(const std::string& folder, Model& md, ck::Engine::Snapshot mode) {
  std::filesystem::remove_all(g_dir + "/" + folder);
  ck::Options o;
  o.dir = g_dir + "/" + folder;
  auto e = std::make_unique<ck::Engine>(o);
  for (uint64_t step = 0; step < 2; ++step) {
    ck::Metadata warm;
    warm.step = step;
    e->save_async(md.views(), warm, mode);
    e->wait();
  }
  return e;
}

void BM_SigmaSaveAsyncBlocked(benchmark::State& state) {
  Model& md = model();
  for (auto _ : state) {
    auto engine = warm_engine("async", md, ck::Engine::Snapshot::now);
    ck::Engine& e = *engine;
    ck::Metadata meta;
    meta.step = 2;
    const ck::SaveResult r = e.save_async(md.views(), meta);
    g_fig["sigma_async_blocked_s"] = r.blocked_s;
    state.SetIterationTime(r.blocked_s);
    e.wait();
  }
}

// A stand-in for a forward and backward pass: the weights multiplied by 64
// tokens' activations, three times over (backward costs about twice the
// forward), on one thread. It only reads the weights, as a real pass does.
double forward_backward(Model& md) {
  constexpr size_t kTokens = 64;
  static std::vector<float> x = [] {
    std::vector<float> v(kTokens * 4096);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) * 0.01f;
    return v;
  }();
  double total = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t k = 0; k < md.w.size(); ++k) {
      if (md.shapes[k].size() != 2) continue;
      const size_t rows = static_cast<size_t>(md.shapes[k][0]), cols = static_cast<size_t>(md.shapes[k][1]);
      const float* w = md.w[k].data();
      for (size_t r = 0; r < rows; ++r) {
        for (size_t t = 0; t < kTokens; ++t) {
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          const float* xt = x.data() + t * cols;
          for (size_t j = 0; j + 8 <= cols; j += 8)
            for (size_t q = 0; q < 8; ++q) acc[q] += xt[j + q] * w[r * cols + j + q];
          total += acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
        }
      }
    }
  }
  return total;
}

// CheckFreq's split: save_async(overlapped) at the step boundary, the next
// forward and backward pass, wait_snapshot() before the optimiser step. The
// caller is blocked for save_async's own time plus whatever of the copy the
// pass did not hide.
void BM_SigmaSaveOverlapped(benchmark::State& state) {
  Model& md = model();
  for (auto _ : state) {
    auto engine = warm_engine("overlap", md, ck::Engine::Snapshot::overlapped);
    ck::Engine& e = *engine;
    std::vector<double> plain;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      benchmark::DoNotOptimize(forward_backward(md));
      plain.push_back(seconds(t0));
    }
    std::sort(plain.begin(), plain.end());
    ck::Metadata meta;
    meta.step = 2;
    const auto t0 = Clock::now();
    const ck::SaveResult r = e.save_async(md.views(), meta, ck::Engine::Snapshot::overlapped);
    benchmark::DoNotOptimize(forward_backward(md));
    const double waited = e.wait_snapshot();
    g_fig["overlap_step_s"] = seconds(t0);
    g_fig["plain_step_s"] = plain[1];
    g_fig["overlap_blocked_s"] = r.blocked_s + waited;
    state.SetIterationTime(g_fig["overlap_blocked_s"]);
    e.wait();
  }
}

#ifdef SIGMA_BENCH_WITH_TORCH
void BM_TorchSave(benchmark::State& state) {
  Model& md = model();
  torch::set_num_threads(1);
  std::vector<torch::Tensor> ts;
  for (auto& v : md.views()) ts.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  const std::string path = g_dir + "/torch.pt";
  for (auto _ : state) {
    const auto t0 = Clock::now();
    torch::save(ts, path);
    const int fd = ::open(path.c_str(), O_RDONLY);
    ::fsync(fd);
    ::close(fd);
    g_fig["torch_save_s"] = seconds(t0);
    state.SetIterationTime(g_fig["torch_save_s"]);
    drop_cache(path);
    std::vector<torch::Tensor> back;
    const auto t1 = Clock::now();
    torch::load(back, path);
    g_fig["torch_load_cold_s"] = seconds(t1);
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--dir")
      g_dir = argv[i + 1];
    else if (std::string(argv[i]) == "--zstd-level")
      g_level = std::atoi(argv[i + 1]);
  std::filesystem::create_directories(g_dir);
  benchmark::Initialize(&argc, argv);
  benchmark::RegisterBenchmark("DiskLimit/write_fsync", BM_DiskLimit)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Sigma/save_base", BM_SigmaSaveBase)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Sigma/save_async_blocked", BM_SigmaSaveAsyncBlocked)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("Sigma/save_async_overlapped_blocked", BM_SigmaSaveOverlapped)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
#ifdef SIGMA_BENCH_WITH_TORCH
  benchmark::RegisterBenchmark("Torch/save_fsync", BM_TorchSave)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
#endif
  benchmark::RunSpecifiedBenchmarks();
  const double raw = static_cast<double>(model().bytes());
  auto f = [](const char* k) { return g_fig.count(k) ? g_fig[k] : NAN; };
  std::printf("\nstate: %.0f MiB (fp32 weights + AdamW m, v after 5 real steps)\n", raw / (1 << 20));
  std::printf("disk limit: write+fsync %.2f s (%.0f MB/s), cold read %.2f s\n", f("disk_write_s"),
              raw / f("disk_write_s") / 1e6, f("disk_read_cold_s"));
  std::printf("sigma save (base): %.2f s = %.0f MB/s raw persisted, %.2fx the disk limit; stored/raw %.3f\n",
              f("sigma_save_s"), raw / f("sigma_save_s") / 1e6, f("disk_write_s") / f("sigma_save_s"),
              f("sigma_base_ratio"));
  std::printf("sigma differential: stored/raw after 1 AdamW step %.3f, after 10 %.3f\n", f("delta1_ratio"),
              f("delta10_ratio"));
  std::printf("  after 1 step by kind: weights %.3f, exp_avg %.3f, exp_avg_sq %.3f\n", f("delta1_w"),
              f("delta1_m"), f("delta1_v"));
  std::printf("sigma save_async: caller blocked %.3f s (a steady-state snapshot: staging memory reused)\n",
              f("sigma_async_blocked_s"));
  std::printf("sigma restore, cold: %.2f s, %.2fx a cold raw read\n", f("sigma_restore_cold_s"),
              f("disk_read_cold_s") / f("sigma_restore_cold_s"));
#ifdef SIGMA_BENCH_WITH_TORCH
  std::printf("torch::save + fsync: %.2f s blocked; sigma async blocks %.1f %% of that\n", f("torch_save_s"),
              100.0 * f("sigma_async_blocked_s") / f("torch_save_s"));
  std::printf("torch::load, cold: %.2f s; sigma restore cold is %.2fx faster\n", f("torch_load_cold_s"),
              f("torch_load_cold_s") / f("sigma_restore_cold_s"));
#endif
  std::printf(
      "sigma save_async overlapped (copy behind a %.2f s forward/backward stand-in): caller blocked %.4f s; "
      "that step took %.2f s\n",
      f("plain_step_s"), f("overlap_blocked_s"), f("overlap_step_s"));
#ifdef SIGMA_BENCH_WITH_TORCH
  std::printf("  = %.2f %% of torch::save + fsync\n", 100.0 * f("overlap_blocked_s") / f("torch_save_s"));
#endif
  std::filesystem::remove_all(g_dir);
  return 0;
}
