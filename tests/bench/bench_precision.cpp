// Reduced precision on this CPU: libtorch's own GEMM in f32 against the
// same GEMM in bf16 (libtorch's CPU path: oneDNN, which uses AVX512-BF16 or
// AMX where the CPU has them), in f16 (libtorch 1.13 has no CPU f16 GEMM:
// the row says so), and in the MoE trainer's f16 arithmetic (operands and
// result rounded through f16, products summed in f32: what --precision f16
// runs, and what an escalated layer saves), one thread. Shapes: the
// trainer's (512 tokens of d_model 128: the qkv projection, an expert's
// first FFN GEMM at its share of tokens, the output head) and a square
// 1024 GEMM. f32 and bf16 write into one output tensor (a fresh output per
// call can cost f32 in page faults); the f16 arithmetic allocates as the
// trainer does. Each kind runs in its own benchmark, f32 first and again
// last (the better of the two is the peer: this machine's rate drifts
// over a run), and the ratio to f32 of the same shape is printed at the
// end of the run: alternating libtorch's
// bf16 path (oneDNN) and its f32 one (OpenBLAS) halves the f32 rate here,
// a cost of alternating that neither precision pays in a training step.
//
//   bench_precision [--benchmark_repetitions=N]
//
// The CPU's flags that decide these paths are printed in the context.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace {

struct Shape {
  int64_t m, k, n;
};
constexpr Shape kShapes[] = {{512, 128, 384}, {160, 128, 256}, {512, 128, 256}, {1024, 1024, 1024}};

torch::Tensor round_f16(const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); }

enum class Kind { f32, bf16, f16, f16_arithmetic };

void BM_Gemm(benchmark::State& state, Kind kind) {
  const Shape s = kShapes[state.range(0)];
  torch::manual_seed(1);
  const torch::Tensor a = torch::randn({s.m, s.k}), b = torch::randn({s.k, s.n});
  const torch::Tensor a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
  const torch::Tensor ah = a.to(torch::kHalf), bh = b.to(torch::kHalf);
  torch::Tensor out;
  std::function<void()> gemm;
  switch (kind) {
    case Kind::f32:
      out = torch::empty({s.m, s.n});
      gemm = [&] { torch::matmul_out(out, a, b); };  // into one output: no page faults per call
      break;
    case Kind::bf16:
      out = torch::empty({s.m, s.n}, torch::kBFloat16);
      gemm = [&] { torch::matmul_out(out, a16, b16); };
      break;
    case Kind::f16:
      gemm = [&] { out = torch::matmul(ah, bh); };
      break;
    case Kind::f16_arithmetic:
      gemm = [&] { out = round_f16(torch::matmul(round_f16(a), round_f16(b))); };
      break;
  }
  try {
    for (int i = 0; i < 3; ++i) gemm();  // warm: packing buffers, pools
  } catch (const std::exception& e) {
    std::string what = e.what();
    state.SkipWithError(("libtorch refuses it: " + what.substr(0, what.find('\n'))).c_str());
    return;
  }
  for (auto _ : state) gemm();
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(s.m * s.k * s.n),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n));
}

// The console's rows, then each reduced precision's rate over f32's at the
// same shape (medians where repetitions ran).
class WithRatios : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || (!r.aggregate_name.empty() && r.aggregate_name != "median")) continue;
      const auto it = r.counters.find("GFLOPs");
      if (it == r.counters.end()) continue;
      std::string name = r.run_name.function_name;  // BM_Gemm/<kind>
      std::string kind = name.substr(name.find('/') + 1);
      if (kind.rfind("f32", 0) == 0) kind = "f32";  // f32 runs first and last: the peer is its best
      double& rate = rate_[{kind, r.report_label}];
      rate = std::max(rate, it->second.value / 1e9);
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nrate over f32's at the same shape (> 1: faster than f32)\n");
    for (const auto& [key, v] : rate_) {
      if (key.first == "f32") continue;
      const auto f32 = rate_.find({"f32", key.second});
      if (f32 == rate_.end()) continue;
      std::printf("  %-16s %-16s %7.1f / %7.1f GFLOP/s = %.3f\n", key.first.c_str(), key.second.c_str(), v,
                  f32->second, v / f32->second);
    }
  }

 private:
  std::map<std::pair<std::string, std::string>, double> rate_;  // (kind, shape) -> GFLOP/s
};

// The CPU flags that choose the bf16 / f16 GEMM paths, from /proc/cpuinfo.
std::string precision_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> want{"avx2",     "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16",
                             "amx_tile", "f16c",    "avx512_vnni", "avx_vnni",    "fma",      "avx512bw"},
      have;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;)
      if (want.count(w)) have.insert(w);
    break;
  }
  std::string out;
  for (const auto& w : have) out += (out.empty() ? "" : " ") + w;
  return out.empty() ? "(none of the listed)" : out;
}

}  // namespace

BENCHMARK_CAPTURE(BM_Gemm, f32, Kind::f32)->DenseRange(0, 3);
BENCHMARK_CAPTURE(BM_Gemm, bf16, Kind::bf16)->DenseRange(0, 3);
BENCHMARK_CAPTURE(BM_Gemm, f16, Kind::f16)->DenseRange(0, 3);
BENCHMARK_CAPTURE(BM_Gemm, f16_arithmetic, Kind::f16_arithmetic)->DenseRange(0, 3);
BENCHMARK_CAPTURE(BM_Gemm, f32_again, Kind::f32)->DenseRange(0, 3);

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  if (auto* set = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  benchmark::AddCustomContext("cpu_precision_flags", precision_flags());
  benchmark::AddCustomContext("threads", "1 (libtorch and OpenBLAS)");
  benchmark::Initialize(&argc, argv);
  WithRatios reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
