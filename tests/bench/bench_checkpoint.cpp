// The checkpoint engine against the disk and (where libtorch is built in)
// against libtorch, side by side in one run, on ~768 MiB of state: fp32
// weights of a transformer's shapes plus AdamW's two moments, their values
// produced by real AdamW steps (synthetic gradients, real optimiser
// arithmetic), not random bits. Each figure is measured kIterations times;
// the summary gives the median and the range. Both sides run with the same
// number of threads (torch::set_num_threads(nproc); the engine's oneTBB
// pool has nproc threads).
//
//   bench_checkpoint [--dir DIR] [--zstd-level N] [--compression automatic|always|never]
//                    [--benchmark_filter=...]
//
// Like is compared with like:
//   disk limit    the raw bytes written + fsync'ed in the engine's own I/O
//                 mode (O_DIRECT), and buffered; a cold read of them
//   save (base)   paired rounds (the order rotating, so that each side
//                 meets the same state of a disk whose rate moves from
//                 minute to minute): the raw bytes written with O_DIRECT +
//                 fsync (the limit), the engine as configured (--compression,
//                 automatic by default) and with every chunk compressed;
//                 the ratios are the rounds' medians
//   blocked time  the time training waits for a checkpoint, on one clock
//                 (the harness's, around the calls that block): the engine's
//                 save_async (warm staging) against libtorch's best async
//                 form, a snapshot then torch::save + fsync on a background
//                 thread, with the snapshot both fresh (clone(), as usually
//                 written) and warm (copy_ into tensors kept from the last
//                 save, as the engine keeps its staging); the faster of the
//                 two is the peer
//   restore       paired rounds from a cold page cache: the engine as
//                 configured, the engine all-zstd, torch::load, and a plain
//                 read of the engine's data files past the page cache
//                 (O_DIRECT) and through it (the disk's rate for the bytes
//                 the engine reads: the faster of the two); both into fresh
//                 memory (the engine into untouched pages; torch::load
//                 allocates) and into the training's own, touched tensors
//                 (the engine in place; torch::load + copy_,
//                 load_state_dict's path)
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
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace {

namespace ck = sigma::checkpoint;
using Clock = std::chrono::steady_clock;
using sigma::bench::drop_cache;
using sigma::bench::Model;

constexpr int kIterations = 5;

std::string g_dir = "build/bench-checkpoint";
int g_level = ck::Options{}.zstd_level;
ck::Compression g_compression = ck::Options{}.compression;
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
  o.compression = g_compression;
  return o;
}

// Contenders of a paired benchmark: a name and a run that returns its
// seconds.
using Sides = std::vector<std::pair<std::string, std::function<double()>>>;

// One paired round: every side once, the order rotated by `round`, each
// time recorded under PREFIX<name>_s; returns the times by name.
std::map<std::string, double> paired_round(Sides& sides, size_t round, const std::string& prefix) {
  std::map<std::string, double> t;
  for (size_t k = 0; k < sides.size(); ++k) {
    auto& [name, run] = sides[(k + round) % sides.size()];
    t[name] = run();
    g_fig[prefix + name + "_s"].push_back(t[name]);
  }
  return t;
}

// One round of base saves, fsync included, side by side (the order
// rotating): the raw bytes written with O_DIRECT and fsync'ed (the disk's
// limit), the engine as configured, and the engine with every chunk
// compressed. The figures are the rounds' medians of each and of each ratio.
void BM_PairedSave(benchmark::State& state) {
  Model& md = model();
  const std::string path = g_dir + "/raw.bin";
  auto save = [&](ck::Compression mode, const std::string& key) {
    ck::Options o = options("sigma");
    o.compression = mode;
    ck::Engine e(o);
    const auto t0 = Clock::now();
    const ck::SaveResult r = e.save(md.views(), ck::Metadata{});
    const double t = seconds(t0);
    g_fig[key + "_ratio"] = {static_cast<double>(r.stored_bytes) / static_cast<double>(r.raw_bytes)};
    return t;
  };
  Sides sides = {
      {"limit",
       [&] {
         std::filesystem::remove(path);
         const auto t0 = Clock::now();
         if (!sigma::bench::write_raw_direct(md, path)) state.SkipWithError("write");
         const double t = seconds(t0);
         std::filesystem::remove(path);
         return t;
       }},
      {"sigma", [&] { return save(g_compression, "save_sigma"); }},
      {"sigma_zstd", [&] { return save(ck::Compression::always, "save_sigma_zstd"); }},
  };
  size_t round = 0;
  for (auto _ : state) {
    std::map<std::string, double> t = paired_round(sides, round++, "save_");
    state.SetIterationTime(t["sigma"]);
    g_fig["save_limit_over_sigma"].push_back(t["limit"] / t["sigma"]);
    g_fig["save_limit_over_sigma_zstd"].push_back(t["limit"] / t["sigma_zstd"]);
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

#ifdef SIGMA_BENCH_WITH_TORCH
std::vector<torch::Tensor> torch_views(Model& md) {
  std::vector<torch::Tensor> ts;
  for (auto& v : md.views()) ts.push_back(torch::from_blob(v.data, v.shape, torch::kFloat));
  return ts;
}
#endif

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

// The data files below `dir`: their bytes, and each dropped from the page
// cache.
uint64_t cold_tree(const std::string& dir, std::vector<std::string>* files = nullptr) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() == "data.bin") {
      drop_cache(e.path().string());
      n += e.file_size();
      if (files) files->push_back(e.path().string());
    }
  return n;
}

// A cold read of `path` in 8 MiB blocks, past the page cache (O_DIRECT) or
// through it (after dropping it): what the device gives for those bytes.
double cold_read(const std::string& path, bool direct) {
  drop_cache(path);
  constexpr size_t kBlock = size_t{8} << 20;
  std::unique_ptr<char, void (*)(void*)> buf(static_cast<char*>(std::aligned_alloc(4096, kBlock)), std::free);
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  while (::read(fd, buf.get(), kBlock) > 0) {
  }
  ::close(fd);
  return seconds(t0);
}

// One round of restores from a cold page cache, side by side so that every
// contender meets the same state of a disk whose rate moves from minute to
// minute: the engine as configured (automatic: the chunks it chose), the
// engine with every chunk compressed, torch::load, and a plain read of the
// engine's data files both past and through the page cache (the disk's
// rate for the bytes the engine reads). The order rotates every round;
// the figures are the rounds' medians of each side and of each ratio.
// `fresh`: into untouched memory (torch::load allocates); else into the
// training's own tensors (the engine in place; torch::load + copy_).
void BM_PairedRestore(benchmark::State& state, bool fresh) {
  Model& md = model();
  const std::string tag = fresh ? "fresh" : "touched";
  ck::Engine chosen(options("restore"));
  chosen.save(md.views(), ck::Metadata{});
  ck::Options zo = options("restore-zstd");
  zo.compression = ck::Compression::always;
  ck::Engine zstd(zo);
  zstd.save(md.views(), ck::Metadata{});
  Model target = md;  // touched memory: the training's own tensors
  std::vector<std::string> files;
  const uint64_t stored = cold_tree(g_dir + "/restore", &files);
#ifdef SIGMA_BENCH_WITH_TORCH
  const std::string pt = g_dir + "/torch-load.pt";
  torch::save(torch_views(md), pt);
  const std::vector<torch::Tensor> into = torch_views(target);
#endif
  auto restore = [&](ck::Engine& e, const std::string& dir) {
    cold_tree(dir);
    std::unique_ptr<FreshState> f = fresh ? std::make_unique<FreshState>(md) : nullptr;
    const auto t0 = Clock::now();
    e.restore(fresh ? f->views : target.views(), nullptr);
    return seconds(t0);
  };
  Sides sides = {
      {"sigma", [&] { return restore(chosen, g_dir + "/restore"); }},
      {"sigma_zstd", [&] { return restore(zstd, g_dir + "/restore-zstd"); }},
      {"read_direct",
       [&] {
         double t = 0;
         for (const auto& f : files) t += cold_read(f, true);
         return t;
       }},
      {"read_buffered",
       [&] {
         double t = 0;
         for (const auto& f : files) t += cold_read(f, false);
         return t;
       }},
#ifdef SIGMA_BENCH_WITH_TORCH
      {"torch",
       [&] {
         drop_cache(pt);
         const auto t0 = Clock::now();
         std::vector<torch::Tensor> back;
         torch::load(back, pt);
         if (!fresh)
           for (size_t i = 0; i < back.size(); ++i) into[i].copy_(back[i]);
         return seconds(t0);
       }},
#endif
  };
  size_t round = 0;
  for (auto _ : state) {
    std::map<std::string, double> t = paired_round(sides, round++, "restore_" + tag + "_");
    state.SetIterationTime(t["sigma"]);
    const double disk = std::min(t["read_direct"], t["read_buffered"]);
    g_fig["restore_" + tag + "_disk_over_sigma"].push_back(disk / t["sigma"]);
    g_fig["restore_" + tag + "_zstd_over_sigma"].push_back(t["sigma_zstd"] / t["sigma"]);
    if (t.count("torch")) g_fig["restore_" + tag + "_torch_over_sigma"].push_back(t["torch"] / t["sigma"]);
  }
  g_fig["restore_stored_bytes"] = {static_cast<double>(stored)};
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
  std::printf(
      "save (base), paired rounds: limit (O_DIRECT write + fsync) %s, sigma %s (stored/raw %.3f), sigma "
      "zstd %s (stored/raw %.3f)\n  limit / sigma %s; limit / sigma zstd %s\n",
      show("save_limit_s").c_str(), show("save_sigma_s").c_str(), med("save_sigma_ratio"),
      show("save_sigma_zstd_s").c_str(), med("save_sigma_zstd_ratio"),
      show("save_limit_over_sigma", 1, "").c_str(), show("save_limit_over_sigma_zstd", 1, "").c_str());
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
  for (const std::string tag : {"fresh", "touched"}) {
    const std::string k = "restore_" + tag + "_";
    std::printf(
        "restore, cold, into %s memory, paired rounds: sigma %s, sigma zstd %s, the disk for sigma's %.0f "
        "MiB: "
        "O_DIRECT %s, buffered %s%s%s\n  disk (the faster read) / sigma %s; sigma zstd / sigma %s%s%s\n",
        tag.c_str(), show(k + "sigma_s").c_str(), show(k + "sigma_zstd_s").c_str(),
        med("restore_stored_bytes") / (1 << 20), show(k + "read_direct_s").c_str(),
        show(k + "read_buffered_s").c_str(), g_fig.count(k + "torch_s") ? ", torch::load" : "",
        g_fig.count(k + "torch_s") ? ((tag == "fresh" ? " " : " + copy_ ") + show(k + "torch_s")).c_str()
                                   : "",
        show(k + "disk_over_sigma", 1, "").c_str(), show(k + "zstd_over_sigma", 1, "").c_str(),
        g_fig.count(k + "torch_s") ? "; torch / sigma " : "",
        g_fig.count(k + "torch_s") ? show(k + "torch_over_sigma", 1, "").c_str() : "");
  }
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
    else if (std::string(argv[i]) == "--compression")
      g_compression = std::string(argv[i + 1]) == "always"  ? ck::Compression::always
                      : std::string(argv[i + 1]) == "never" ? ck::Compression::never
                                                            : ck::Compression::automatic;
  std::filesystem::create_directories(g_dir);
#ifdef SIGMA_BENCH_WITH_TORCH
  torch::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
#endif
  benchmark::Initialize(&argc, argv);
  add("DiskLimit/write_fsync_direct", BM_DiskLimit, true);
  add("DiskLimit/write_fsync_buffered", BM_DiskLimit, false);
  add("Paired/save_base", BM_PairedSave);
  add("Sigma/save_async_blocked", BM_SigmaSaveAsyncBlocked);
  add("Sigma/save_async_overlapped_blocked", BM_SigmaSaveOverlapped);
  add("Paired/restore_cold_fresh", BM_PairedRestore, true);
  add("Paired/restore_cold_touched", BM_PairedRestore, false);
#ifdef SIGMA_BENCH_WITH_TORCH
  add("Torch/save_fsync_sync", BM_TorchSaveSync);
  add("Torch/save_async_clone_blocked", BM_TorchSaveAsync, false);
  add("Torch/save_async_warm_blocked", BM_TorchSaveAsync, true);
#endif
  benchmark::RunSpecifiedBenchmarks();
  differential_ratios();
  summary();
  std::filesystem::remove_all(g_dir);
  return 0;
}
