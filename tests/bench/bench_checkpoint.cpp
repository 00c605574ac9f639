// The checkpoint engine against the disk and (where libtorch is built in)
// against libtorch, side by side in one run, on ~768 MiB of state: fp32
// weights of a transformer's shapes plus AdamW's two moments, their values
// produced by real AdamW steps (synthetic gradients, real optimiser
// arithmetic), not random bits. Each figure is measured kIterations times;
// the summary gives the median and the range. Both sides run with the same
// number of threads (torch::set_num_threads(nproc); the engine's oneTBB
// pool has nproc threads).
//
//   bench_checkpoint [--dir DIR] [--zstd-level N] [--benchmark_filter=...]
//
// Like is compared with like:
//   disk limit    the raw bytes written + fsync'ed in the engine's own I/O
//                 mode (O_DIRECT), and buffered; a cold read of them
//   save (base)   raw bytes persisted per second, fsync included, / the
//                 O_DIRECT limit
//   blocked time  the time training waits for a checkpoint, on one clock
//                 (the harness's, around the calls that block): the engine's
//                 save_async (warm staging) against libtorch's best async
//                 form, a snapshot then torch::save + fsync on a background
//                 thread, with the snapshot both fresh (clone(), as usually
//                 written) and warm (copy_ into tensors kept from the last
//                 save, as the engine keeps its staging); the faster of the
//                 two is the peer
//   restore       from a cold page cache, both into fresh memory (the
//                 engine into untouched pages; torch::load allocates), and
//                 both into the training's own, touched tensors (the engine
//                 in place; torch::load + copy_, load_state_dict's path)
//   differential  stored / raw bytes after 1 and 10 AdamW steps
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
#include <thread>
#include <vector>

namespace {

namespace ck = sigma::checkpoint;
using Clock = std::chrono::steady_clock;
using sigma::bench::drop_cache;
using sigma::bench::Model;

constexpr int kIterations = 3;

std::string g_dir = "build/bench-checkpoint";
int g_level = ck::Options{}.zstd_level;
std::map<std::string, std::vector<double>> g_fig;  // every sample of each figure

Model& model() {
  static Model* m = [] {
    auto* x = new Model();
    for (int i = 0; i < 5; ++i) x->adamw_step();  // moments that are not zeros
    return x;
  }();
  return *m;
}

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Records one sample of `key` and makes it the iteration's time.
void sample(benchmark::State& state, const std::string& key, double s) {
  g_fig[key].push_back(s);
  state.SetIterationTime(s);
}

void drop_tree(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) drop_cache(e.path().string());
}

void BM_DiskLimit(benchmark::State& state, bool direct) {
  Model& md = model();
  const std::string path = g_dir + "/raw.bin";
  for (auto _ : state) {
    std::filesystem::remove(path);
    const auto t0 = Clock::now();
    if (!(direct ? sigma::bench::write_raw_direct(md, path) : sigma::bench::write_raw(md, path)))
      state.SkipWithError("write");
    sample(state, direct ? "disk_write_direct_s" : "disk_write_buffered_s", seconds(t0));
    if (!direct) continue;
    drop_cache(path);
    std::vector<char> buf(64 << 20);
    const auto t1 = Clock::now();
    const int rfd = ::open(path.c_str(), O_RDONLY);
    while (::read(rfd, buf.data(), buf.size()) > 0) {
    }
    ::close(rfd);
    g_fig["disk_read_cold_s"].push_back(seconds(t1));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(md.bytes()));
}

ck::Options options(const std::string& folder) {
  std::filesystem::remove_all(g_dir + "/" + folder);
  ck::Options o;
  o.dir = g_dir + "/" + folder;
  o.base_every = 100;
  o.zstd_level = g_level;
  return o;
}

void BM_SigmaSaveBase(benchmark::State& state) {
  Model& md = model();
  for (auto _ : state) {
    ck::Engine e(options("sigma"));
    const auto t0 = Clock::now();
    const ck::SaveResult r = e.save(md.views(), ck::Metadata{});
    sample(state, "sigma_save_s", seconds(t0));
    g_fig["sigma_base_ratio"] = {static_cast<double>(r.stored_bytes) / static_cast<double>(r.raw_bytes)};
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(md.bytes()));
}

// Differential checkpoints after 1 and 10 AdamW steps, against a base;
// deterministic, so measured once.
void differential_ratios() {
  Model& md = model();
  ck::Engine e(options("delta"));
  e.save(md.views(), ck::Metadata{});
  Model copy = md;
  copy.adamw_step();
  ck::Metadata meta;
  meta.step = 1;
  const ck::SaveResult d1 = e.save(copy.views(), meta);
  g_fig["delta1_ratio"] = {static_cast<double>(d1.stored_bytes) / static_cast<double>(d1.raw_bytes)};
  double raw[3] = {0, 0, 0}, stored[3] = {0, 0, 0};  // weights, first moments, second moments
  for (const auto& t : ck::inspect(d1.path).tensors) {
    const auto ends = [&](const std::string& x) {
      return t.name.size() > x.size() && t.name.compare(t.name.size() - x.size(), x.size(), x) == 0;
    };
    const int kind = ends(".exp_avg") ? 1 : ends(".exp_avg_sq") ? 2 : 0;
    raw[kind] += static_cast<double>(t.bytes);
    stored[kind] += static_cast<double>(t.stored_bytes);
  }
  g_fig["delta1_w"] = {stored[0] / raw[0]};
  g_fig["delta1_m"] = {stored[1] / raw[1]};
  g_fig["delta1_v"] = {stored[2] / raw[2]};
  for (int i = 0; i < 9; ++i) copy.adamw_step();
  meta.step = 10;
  const ck::SaveResult d10 = e.save(copy.views(), meta);
  g_fig["delta10_ratio"] = {static_cast<double>(d10.stored_bytes) / static_cast<double>(d10.raw_bytes)};
  std::filesystem::remove_all(g_dir + "/delta");
}

// Memory the process has never touched, as a restore into a new process
// meets it: `new float[n]` leaves the pages unmapped until written.
struct FreshState {
  std::vector<std::unique_ptr<float[]>> arrays;
  std::vector<ck::TensorView> views;
  explicit FreshState(Model& md) {
    for (const ck::TensorView& v : md.views()) {
      size_t n = 1;
      for (int64_t d : v.shape) n *= static_cast<size_t>(d);
      arrays.emplace_back(new float[n]);
      views.push_back({v.name, v.dtype, v.shape, arrays.back().get()});
    }
  }
};

void BM_SigmaRestore(benchmark::State& state, bool fresh) {
  Model& md = model();
  ck::Engine e(options("restore"));
  e.save(md.views(), ck::Metadata{});
  Model target = md;  // touched memory: the training's own tensors
  for (auto _ : state) {
    drop_tree(g_dir + "/restore");
    std::unique_ptr<FreshState> f = fresh ? std::make_unique<FreshState>(md) : nullptr;
    const auto t0 = Clock::now();
    e.restore(fresh ? f->views : target.views(), nullptr);
    sample(state, fresh ? "sigma_restore_fresh_s" : "sigma_restore_touched_s", seconds(t0));
  }
}

// An engine in a fresh folder below g_dir that has saved twice: the first
// snapshots pay for fresh staging memory; a training loop's later ones
// reuse it, so the figures are of the third save and after.
std::unique_ptr<ck::Engine> warm_engine(const std::string& folder, Model& md, ck::Engine::Snapshot mode) {
  ck::Options o = options(folder);
  // Every save a full base: the state does not change between these saves,
  // and a delta of unchanged chunks would write nothing, which is not a
  // save to compare with torch::save's.
  o.base_every = 1;
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
  auto engine = warm_engine("async", md, ck::Engine::Snapshot::now);
  uint64_t step = 2;
  for (auto _ : state) {
    ck::Metadata meta;
    meta.step = step++;
    // One clock for both sides: the harness's, around the call that
    // blocks, as torch's snapshot is timed below (the engine's own
    // blocked_s is kept beside it, to show they agree).
    const auto t0 = Clock::now();
    const ck::SaveResult r = engine->save_async(md.views(), meta);
    sample(state, "sigma_async_blocked_s", seconds(t0));
    g_fig["sigma_async_engine_blocked_s"].push_back(r.blocked_s);
    engine->wait();
    g_fig["sigma_async_total_s"].push_back(seconds(t0));
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
  auto engine = warm_engine("overlap", md, ck::Engine::Snapshot::overlapped);
  uint64_t step = 2;
  for (auto _ : state) {
    const auto p0 = Clock::now();
    benchmark::DoNotOptimize(forward_backward(md));
    g_fig["plain_step_s"].push_back(seconds(p0));
    ck::Metadata meta;
    meta.step = step++;
    const auto t0 = Clock::now();
    engine->save_async(md.views(), meta, ck::Engine::Snapshot::overlapped);
    const double called = seconds(t0);
    benchmark::DoNotOptimize(forward_backward(md));
    const auto w0 = Clock::now();
    engine->wait_snapshot();
    const double waited = seconds(w0);
    g_fig["overlap_step_s"].push_back(seconds(t0));
    sample(state, "overlap_blocked_s", called + waited);
    engine->wait();
  }
}

#ifdef SIGMA_BENCH_WITH_TORCH
std::vector<torch::Tensor> torch_views(Model& md) {
  std::vector<torch::Tensor> ts;
  for (auto& v : md.views()) ts.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  return ts;
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
}

// torch::save + fsync on the caller's thread: the synchronous baseline.
void BM_TorchSaveSync(benchmark::State& state) {
  const std::vector<torch::Tensor> ts = torch_views(model());
  const std::string path = g_dir + "/torch-sync.pt";
  for (auto _ : state) {
    const auto t0 = Clock::now();
    torch::save(ts, path);
    fsync_file(path);
    sample(state, "torch_save_sync_s", seconds(t0));
  }
}

// libtorch's asynchronous form: the training thread takes a snapshot, a
// background thread saves it and fsyncs. `warm`: the snapshot is copy_'d
// into tensors kept from the previous save; otherwise clone()d afresh.
void BM_TorchSaveAsync(benchmark::State& state, bool warm) {
  const std::vector<torch::Tensor> ts = torch_views(model());
  const std::string path = g_dir + (warm ? "/torch-async-warm.pt" : "/torch-async.pt");
  std::vector<torch::Tensor> staging;
  for (const auto& t : ts) staging.push_back(torch::empty_like(t));
  for (auto& s : staging) s.zero_();  // touched, as after an earlier save
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::vector<torch::Tensor> snap;
    if (warm) {
      for (size_t i = 0; i < ts.size(); ++i) staging[i].copy_(ts[i]);
      snap = staging;
    } else {
      for (const auto& t : ts) snap.push_back(t.clone());
    }
    sample(state, warm ? "torch_async_warm_blocked_s" : "torch_async_clone_blocked_s", seconds(t0));
    std::thread writer([&] {
      torch::save(snap, path);
      fsync_file(path);
    });
    writer.join();
    g_fig[warm ? "torch_async_warm_total_s" : "torch_async_clone_total_s"].push_back(seconds(t0));
  }
}

// torch::load from a cold page cache. `touched`: then copied into the
// training's own tensors, as load_state_dict does.
void BM_TorchLoad(benchmark::State& state, bool touched) {
  Model target = model();
  const std::vector<torch::Tensor> into = torch_views(target);
  const std::string path = g_dir + "/torch-load.pt";
  torch::save(torch_views(model()), path);
  for (auto _ : state) {
    drop_cache(path);
    const auto t0 = Clock::now();
    std::vector<torch::Tensor> back;
    torch::load(back, path);
    if (touched)
      for (size_t i = 0; i < back.size(); ++i) into[i].copy_(back[i]);
    sample(state, touched ? "torch_load_touched_s" : "torch_load_fresh_s", seconds(t0));
  }
}
#endif

struct Stat {
  double median = NAN, lo = NAN, hi = NAN;
};

Stat stat(const std::string& key) {
  auto it = g_fig.find(key);
  if (it == g_fig.end() || it->second.empty()) return {};
  std::vector<double> v = it->second;
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// "1.23 s [1.20-1.31]"
std::string show(const std::string& key, double scale = 1, const char* unit = "s") {
  const Stat s = stat(key);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f %s [%.3f-%.3f]", s.median * scale, unit, s.lo * scale, s.hi * scale);
  return buf;
}

double med(const std::string& key) { return stat(key).median; }

void summary() {
  const double raw = static_cast<double>(model().bytes());
  std::printf(
      "\nstate: %.0f MiB (fp32 weights + AdamW m, v after 5 real steps); %d iterations each, median "
      "[min-max]; %u threads on both sides\n",
      raw / (1 << 20), kIterations, std::thread::hardware_concurrency());
  std::printf("disk limit, O_DIRECT (the engine's mode): write+fsync %s = %.0f MB/s\n",
              show("disk_write_direct_s").c_str(), raw / med("disk_write_direct_s") / 1e6);
  std::printf("disk limit, buffered: write+fsync %s = %.0f MB/s; cold read %s\n",
              show("disk_write_buffered_s").c_str(), raw / med("disk_write_buffered_s") / 1e6,
              show("disk_read_cold_s").c_str());
  std::printf("sigma save (base): %s = %.0f MB/s raw persisted, %.2fx the O_DIRECT limit; stored/raw %.3f\n",
              show("sigma_save_s").c_str(), raw / med("sigma_save_s") / 1e6,
              med("disk_write_direct_s") / med("sigma_save_s"), med("sigma_base_ratio"));
  std::printf("sigma differential: stored/raw after 1 AdamW step %.3f, after 10 %.3f\n", med("delta1_ratio"),
              med("delta10_ratio"));
  std::printf("  after 1 step by kind: weights %.3f, exp_avg %.3f, exp_avg_sq %.3f\n", med("delta1_w"),
              med("delta1_m"), med("delta1_v"));
  std::printf(
      "blocked, sigma save_async (warm staging): %s (the engine's own blocked_s: %s); whole save %s\n",
      show("sigma_async_blocked_s").c_str(), show("sigma_async_engine_blocked_s").c_str(),
      show("sigma_async_total_s").c_str());
  std::printf(
      "blocked, sigma save_async overlapped behind a %.2f s forward/backward stand-in: %s; that step %s\n",
      med("plain_step_s"), show("overlap_blocked_s").c_str(), show("overlap_step_s").c_str());
  std::printf("restore, cold, into fresh memory: sigma %s\n", show("sigma_restore_fresh_s").c_str());
  std::printf("restore, cold, into touched memory: sigma %s (a cold raw read: %.3f s)\n",
              show("sigma_restore_touched_s").c_str(), med("disk_read_cold_s"));
#ifdef SIGMA_BENCH_WITH_TORCH
  const double clone = med("torch_async_clone_blocked_s"), warm = med("torch_async_warm_blocked_s");
  const double best = std::min(clone, warm);
  std::printf(
      "blocked, torch async (snapshot, then save + fsync on a thread): clone %s, warm copy_ %s; whole "
      "save %s / %s\n",
      show("torch_async_clone_blocked_s").c_str(), show("torch_async_warm_blocked_s").c_str(),
      show("torch_async_clone_total_s").c_str(), show("torch_async_warm_total_s").c_str());
  std::printf("  sigma blocked / torch's best async blocked (%s): %.2f; overlapped: %.3f\n",
              clone <= warm ? "clone" : "warm copy_", med("sigma_async_blocked_s") / best,
              med("overlap_blocked_s") / best);
  std::printf("torch::save + fsync, synchronous: %s\n", show("torch_save_sync_s").c_str());
  std::printf("restore into fresh memory: torch::load %s; torch / sigma %.2f\n",
              show("torch_load_fresh_s").c_str(), med("torch_load_fresh_s") / med("sigma_restore_fresh_s"));
  std::printf("restore into touched memory: torch::load + copy_ %s; torch / sigma %.2f\n",
              show("torch_load_touched_s").c_str(),
              med("torch_load_touched_s") / med("sigma_restore_touched_s"));
#endif
}

template <class F, class... Args>
void add(const char* name, F f, Args... args) {
  benchmark::RegisterBenchmark(name, f, args...)
      ->Iterations(kIterations)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--dir")
      g_dir = argv[i + 1];
    else if (std::string(argv[i]) == "--zstd-level")
      g_level = std::atoi(argv[i + 1]);
  std::filesystem::create_directories(g_dir);
#ifdef SIGMA_BENCH_WITH_TORCH
  torch::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
#endif
  benchmark::Initialize(&argc, argv);
  add("DiskLimit/write_fsync_direct", BM_DiskLimit, true);
  add("DiskLimit/write_fsync_buffered", BM_DiskLimit, false);
  add("Sigma/save_base", BM_SigmaSaveBase);
  add("Sigma/save_async_blocked", BM_SigmaSaveAsyncBlocked);
  add("Sigma/save_async_overlapped_blocked", BM_SigmaSaveOverlapped);
  add("Sigma/restore_cold_fresh", BM_SigmaRestore, true);
  add("Sigma/restore_cold_touched", BM_SigmaRestore, false);
#ifdef SIGMA_BENCH_WITH_TORCH
  add("Torch/save_fsync_sync", BM_TorchSaveSync);
  add("Torch/save_async_clone_blocked", BM_TorchSaveAsync, false);
  add("Torch/save_async_warm_blocked", BM_TorchSaveAsync, true);
  add("Torch/load_cold_fresh", BM_TorchLoad, false);
  add("Torch/load_cold_touched", BM_TorchLoad, true);
#endif
  benchmark::RunSpecifiedBenchmarks();
  differential_ratios();
  summary();
  std::filesystem::remove_all(g_dir);
  return 0;
}
