// The MoE autotuner against a slow link, in one run: four ranks
// (parallel_rank_worker "autotune": a 4-rank MoE layer, 48 tokens per rank,
// top-2 of 8 experts, 40 ms paced steps) on the sim vendor, whose scenario
// makes rank 2's link move bytes 4x slower for 4 s (slow_bandwidth, 2 MB/s
// healthy: a link that is slow per byte). Once with the autotuner, once
// without. Per configuration: the median of each step's slowest exchange,
// healthy (before the slow link) and while slow (after the experts moved
// off, with the autotuner). Three configurations: no autotuner; experts
// moved off (a placement: results bitwise unchanged); experts moved off and
// the slow rank given half an even share of the tokens
// (slow_token_share 0.5: data re-balancing, which changes which rank
// computes which tokens). "recovered" is the share of the slowdown each
// takes back: (slow without - slow with) / (slow without - healthy).
// Goal: 50 %.
//
// Before any figure counts, every rank must have exited 0 and the run must
// show the slow window; the experts-only configuration's outputs must be
// bitwise the no-autotuner ones (a placement changes nothing else). A run
// that fails any of these fails the benchmark (exit 1), saying why.
//
//   bench_autotune
#include <benchmark/benchmark.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Run {
  double healthy_ms = 0, slow_ms = 0;
  int moves = 0;
  std::string outputs;  // every rank's out-R.txt, in rank order
  std::string failure;  // empty when the run is sound
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Run run(int mode) {  // 0: no autotuner, 1: experts, 2: experts and tokens
  const bool autotune = mode > 0;
  const std::string dir =
      "/tmp/sigma-bench-autotune-" + std::to_string(::getpid()) + "-" + std::to_string(mode);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/scenario.yaml") << "seed: 1\nduration_s: 600\nworld_size: 4\nfaults:\n"
                                           "  - {kind: slow_bandwidth, device: 2, at_s: 1.5, duration_s: 4, "
                                           "factor: 4, gbps: 0.002}\n";
  if (!autotune) std::ofstream(dir + "/no-autotune");
  if (mode == 2) std::ofstream(dir + "/token-share") << "0.5\n";
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl(PARALLEL_WORKER, PARALLEL_WORKER, "autotune", std::to_string(r).c_str(), "4", dir.c_str(),
              nullptr);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  Run out;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      out.failure += "rank " + std::to_string(r) + " ended with status " + std::to_string(status) + "; ";
  }
  for (int r = 0; r < 4; ++r) {
    std::ifstream f(dir + "/out-" + std::to_string(r) + ".txt");
    out.outputs += std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  std::vector<json> samples, moves;
  std::ifstream s(dir + "/samples.jsonl"), m(dir + "/rebalances.jsonl");
  for (std::string l; std::getline(s, l);) samples.push_back(json::parse(l));
  for (std::string l; std::getline(m, l);) moves.push_back(json::parse(l));
  int64_t first = -1, last = -1;
  for (const auto& x : samples)
    if (x["retries_per_s"][2].get<double>() >= 20) {
      if (first < 0) first = x["step"].get<int64_t>();
      last = x["step"].get<int64_t>();
    }
  // While slow: from after the experts moved (or, without the autotuner,
  // the same number of steps in), to the end of the slow window.
  const int64_t from = moves.empty() ? first + 3 : moves[0]["step"].get<int64_t>() + 1;
  std::vector<double> healthy, slow;
  for (const auto& x : samples) {
    const int64_t st = x["step"].get<int64_t>();
    const auto& e = x["exchange_s"];
    double worst = 0;
    for (const auto& v : e) worst = std::max(worst, v.get<double>());
    if (st >= 5 && st < first) healthy.push_back(worst * 1e3);
    if (st >= from && st <= last) slow.push_back(worst * 1e3);
  }
  if (first < 0) out.failure += "the sim vendor never reported rank 2's link retrying; ";
  if (healthy.empty() || slow.empty()) out.failure += "no healthy or no slow steps to compare; ";
  if (autotune && moves.empty()) out.failure += "the autotuner never moved an expert; ";
  if (out.outputs.empty()) out.failure += "no rank wrote its outputs; ";
  fs::remove_all(dir);
  out.healthy_ms = median(healthy);
  out.slow_ms = median(slow);
  out.moves = static_cast<int>(moves.size());
  return out;
}

Run g_runs[3];

void BM_SlowLink(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  Run r;
  for (auto _ : state) r = run(mode);
  g_runs[mode] = r;
  if (!r.failure.empty()) {
    state.SkipWithError(r.failure.c_str());
    return;
  }
  state.counters["healthy_ms"] = r.healthy_ms;
  state.counters["slow_ms"] = r.slow_ms;
  state.counters["rebalances"] = r.moves;
}

BENCHMARK(BM_SlowLink)
    ->ArgName("autotune")  // 0 off, 1 experts, 2 experts and tokens
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  bool sound = true;
  for (int mode = 0; mode < 3; ++mode)
    if (!g_runs[mode].failure.empty()) {
      std::fprintf(stderr, "bench_autotune: configuration %d failed: %s\n", mode,
                   g_runs[mode].failure.c_str());
      sound = false;
    }
  if (sound && g_runs[1].outputs != g_runs[0].outputs) {
    std::fprintf(stderr,
                 "bench_autotune: the experts-only run's outputs differ from the no-autotuner run's\n");
    sound = false;
  }
  if (!sound) return 1;
  const Run& off = g_runs[0];
  const double healthy = off.healthy_ms, lost = off.slow_ms - healthy;
  const auto recovered = [&](const Run& r) {
    return lost > 0 ? 100 * (off.slow_ms - r.slow_ms) / lost : 0.0;
  };
  std::printf(
      "\nslowest exchange per step, median: healthy %.2f ms; slow link %.2f ms without the autotuner, "
      "%.2f ms with experts moved off, %.2f ms with experts moved off and half the tokens\n"
      "recovered: %.0f %% (experts), %.0f %% (experts and tokens) of the slowdown (goal 50 %%)\n",
      healthy, off.slow_ms, g_runs[1].slow_ms, g_runs[2].slow_ms, recovered(g_runs[1]), recovered(g_runs[2]));
  return 0;
}
