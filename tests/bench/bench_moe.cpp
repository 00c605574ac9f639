// MoE dispatch: sigma's permute / unpermute kernels against the same thing
// written with libtorch (stable argsort + index_select to gather,
// multiply + index_add_ to scatter back, into outputs allocated once on
// both sides), side by side in one run, one thread each (libtorch is told
// so; ours is single-threaded).
// 8192 tokens x hidden 1024, top-2 of 8 experts, f32 and bf16.
//
//   bench_moe [--benchmark_repetitions=N]
#include <sigma/kernels.hpp>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <random>

namespace {

constexpr int64_t kTokens = 8192, kHidden = 1024, kTopK = 2, kExperts = 8;

struct Inputs {
  torch::Tensor tokens, ids, weights;  // [T, H], [T, K] int32, [T, K] f32
};

Inputs make(torch::ScalarType dt) {
  torch::manual_seed(1);
  Inputs in;
  in.tokens = torch::randn({kTokens, kHidden}).to(dt);
  // Two distinct experts per token, as a top-2 router gives.
  auto scores = torch::rand({kTokens, kExperts});
  auto top = std::get<1>(scores.topk(kTopK, 1));
  in.ids = top.to(torch::kInt32).contiguous();
  in.weights = torch::softmax(torch::rand({kTokens, kTopK}), 1).contiguous();
  return in;
}

hal_dtype_t hal_dtype(torch::ScalarType dt) { return dt == torch::kFloat ? HAL_DTYPE_F32 : HAL_DTYPE_BF16; }

void BM_Torch(benchmark::State& state, torch::ScalarType dt, bool unpermute) {
  const Inputs in = make(dt);
  // The plan the torch way: a stable sort of the flattened choices.
  auto flat = in.ids.view({-1}).to(torch::kLong);
  auto order = std::get<1>(flat.sort(c10::optional<bool>(true), 0, false));  // stable
  auto token_of_row = order.div(kTopK, "floor");
  auto permuted = in.tokens.index_select(0, token_of_row);
  auto w_of_row = in.weights.view({-1}).index_select(0, order).to(dt).unsqueeze(1);
  // Outputs allocated once, as ours are: a fresh 64 MiB tensor per call
  // costs this machine ~200 ms of page faults, which is not the kernel.
  auto out = torch::empty({kTokens * kTopK, kHidden}, in.tokens.options());
  auto weighted = torch::empty_like(permuted);
  auto back = torch::empty({kTokens, kHidden}, in.tokens.options());
  for (auto _ : state) {
    if (!unpermute) {
      auto o = std::get<1>(flat.sort(c10::optional<bool>(true), 0, false));
      auto t = o.div(kTopK, "floor");
      torch::index_select_out(out, in.tokens, 0, t);
      auto counts = flat.bincount({}, kExperts);
      benchmark::DoNotOptimize(out.data_ptr());
      benchmark::DoNotOptimize(counts.data_ptr());
    } else {
      torch::mul_out(weighted, permuted, w_of_row);
      back.zero_();
      back.index_add_(0, token_of_row, weighted);
      benchmark::DoNotOptimize(back.data_ptr());
    }
  }
  state.SetBytesProcessed(state.iterations() * kTokens * kTopK * kHidden * in.tokens.element_size());
}

void BM_Sigma(benchmark::State& state, torch::ScalarType dt, bool unpermute) {
  const Inputs in = make(dt);
  const hal_dtype_t hd = hal_dtype(dt);
  std::vector<int64_t> row(kTokens * kTopK);
  std::vector<uint64_t> off(kExperts + 1);
  sigma::kernels::moe_plan(in.ids.data_ptr<int32_t>(), kTokens, kTopK, kExperts, row.data(), off.data());
  auto permuted = torch::empty({kTokens * kTopK, kHidden}, in.tokens.options());
  sigma::kernels::moe_permute(in.tokens.data_ptr(), kTokens, kHidden, hd, row.data(), kTopK,
                              permuted.data_ptr());
  auto out = torch::empty({kTokens, kHidden}, in.tokens.options());
  for (auto _ : state) {
    if (!unpermute) {
      sigma::kernels::moe_plan(in.ids.data_ptr<int32_t>(), kTokens, kTopK, kExperts, row.data(), off.data());
      sigma::kernels::moe_permute(in.tokens.data_ptr(), kTokens, kHidden, hd, row.data(), kTopK,
                                  permuted.data_ptr());
      benchmark::DoNotOptimize(permuted.data_ptr());
    } else {
      sigma::kernels::moe_unpermute(permuted.data_ptr(), row.data(), in.weights.data_ptr<float>(), kTokens,
                                    kTopK, kHidden, hd, out.data_ptr());
      benchmark::DoNotOptimize(out.data_ptr());
    }
  }
  state.SetBytesProcessed(state.iterations() * kTokens * kTopK * kHidden * in.tokens.element_size());
}

class Table : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> seconds;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      std::string name = r.benchmark_name();
      name = name.substr(0, name.find("/real_time"));
      seconds[name] = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    const std::string d = dt == torch::kFloat ? "f32" : "bf16";
    for (bool un : {false, true}) {
      const std::string op = un ? "unpermute" : "permute";
      benchmark::RegisterBenchmark(("torch/" + op + "/" + d).c_str(), BM_Torch, dt, un)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("sigma/" + op + "/" + d).c_str(), BM_Sigma, dt, un)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  Table t;
  benchmark::RunSpecifiedBenchmarks(&t);
  std::printf("\n%-18s %10s %10s %8s\n", "op", "torch ms", "sigma ms", "speedup");
  for (const char* d : {"f32", "bf16"})
    for (const char* op : {"permute", "unpermute"}) {
      const std::string key = std::string(op) + "/" + d;
      auto a = t.seconds.find("torch/" + key), b = t.seconds.find("sigma/" + key);
      if (a == t.seconds.end() || b == t.seconds.end()) continue;
      std::printf("%-18s %10.2f %10.2f %7.2fx\n", key.c_str(), a->second, b->second, a->second / b->second);
    }
  return 0;
}
