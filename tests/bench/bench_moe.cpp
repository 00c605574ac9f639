// MoE dispatch: sigma's permute / unpermute kernels against the same thing
// written with libtorch, side by side in one run, one thread each
// (libtorch is told so; ours is single-threaded), outputs allocated once on
// both sides. 8192 tokens x hidden 1024, top-2 of 8 experts, f32 and bf16.
// sigma's permute runs twice: into a tensor (64-byte aligned) and into a
// destination only 16-byte aligned, as the dispatcher's vectors are.
//
// libtorch's permute: a stable argsort of the choices + index_select. Its
// unpermute in three forms, each timed, the fastest taken as the peer:
//   index_add  multiply each row by its weight, index_add_ into the tokens
//   bmm        gather the rows back to token order, then a [1,K]x[K,H] bmm
//   mul_sum    gather the rows back, multiply by the weights, sum over K
// Before anything is timed, every form's output is checked against sigma's:
// bitwise for permute, within a few bf16 / f32 rounding steps for the
// weighted sums (the orders of the additions differ).
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

// libtorch's plan and buffers, made once; every form writes into them.
struct TorchMoe {
  Inputs in;
  torch::Tensor flat, token_of_row, inverse, permuted, w_of_row, w_tk;
  torch::Tensor out, weighted, gathered, back;
  torch::Tensor back_t1h, weighted_tkh;  // views of back and weighted, shaped for bmm and the sum
  explicit TorchMoe(torch::ScalarType dt) : in(make(dt)) {
    flat = in.ids.view({-1}).to(torch::kLong);
    auto order = std::get<1>(flat.sort(c10::optional<bool>(true), 0, false));  // stable
    token_of_row = order.div(kTopK, "floor");
    inverse = torch::empty_like(order);
    inverse.index_put_({order}, torch::arange(order.numel(), order.options()));
    permuted = in.tokens.index_select(0, token_of_row);
    w_of_row = in.weights.view({-1}).index_select(0, order).to(dt).unsqueeze(1);
    w_tk = in.weights.to(dt);
    // A fresh 64 MiB tensor per call costs this machine ~200 ms of page
    // faults, which is not the kernel: outputs are allocated once.
    out = torch::empty({kTokens * kTopK, kHidden}, in.tokens.options());
    weighted = torch::empty_like(permuted);
    gathered = torch::empty_like(permuted);
    back = torch::empty({kTokens, kHidden}, in.tokens.options());
    back_t1h = back.view({kTokens, 1, kHidden});
    weighted_tkh = weighted.view({kTokens, kTopK, kHidden});
  }
  void permute() {
    auto o = std::get<1>(flat.sort(c10::optional<bool>(true), 0, false));
    auto t = o.div(kTopK, "floor");
    torch::index_select_out(out, in.tokens, 0, t);
    auto counts = flat.bincount({}, kExperts);
    benchmark::DoNotOptimize(counts.data_ptr());
  }
  void unpermute(const std::string& form) {
    if (form == "index_add") {
      torch::mul_out(weighted, permuted, w_of_row);
      back.zero_();
      back.index_add_(0, token_of_row, weighted);
      return;
    }
    torch::index_select_out(gathered, permuted, 0, inverse);  // rows back in token order
    const auto g = gathered.view({kTokens, kTopK, kHidden});
    if (form == "bmm") {
      torch::bmm_out(back_t1h, w_tk.view({kTokens, 1, kTopK}), g);
    } else {
      torch::mul_out(weighted_tkh, g, w_tk.view({kTokens, kTopK, 1}));
      torch::sum_out(back, weighted_tkh, {1});
    }
  }
};

const std::vector<std::string> kUnpermuteForms = {"index_add", "bmm", "mul_sum"};

// sigma's plan and buffers.
struct SigmaMoe {
  Inputs in;
  hal_dtype_t hd;
  std::vector<int64_t> row = std::vector<int64_t>(kTokens * kTopK);
  std::vector<uint64_t> off = std::vector<uint64_t>(kExperts + 1);
  torch::Tensor permuted, out;
  // dst16: the permute's destination 16 bytes past a 64-byte boundary, as
  // a std::vector's storage from malloc is (the dispatcher's buffers).
  explicit SigmaMoe(torch::ScalarType dt, bool dst16 = false) : in(make(dt)), hd(hal_dtype(dt)) {
    const int64_t skip = dst16 ? 16 / in.tokens.element_size() : 0;
    permuted = torch::empty({kTokens * kTopK * kHidden + skip}, in.tokens.options())
                   .narrow(0, skip, kTokens * kTopK * kHidden)
                   .view({kTokens * kTopK, kHidden});
    out = torch::empty({kTokens, kHidden}, in.tokens.options());
    permute();
  }
  void permute() {
    sigma::kernels::moe_plan(in.ids.data_ptr<int32_t>(), kTokens, kTopK, kExperts, row.data(), off.data());
    sigma::kernels::moe_permute(in.tokens.data_ptr(), kTokens, kHidden, hd, row.data(), kTopK,
                                permuted.data_ptr());
  }
  void unpermute() {
    sigma::kernels::moe_unpermute(permuted.data_ptr(), row.data(), in.weights.data_ptr<float>(), kTokens,
                                  kTopK, kHidden, hd, out.data_ptr());
  }
};

// Both sides compute the same thing, or the timing means nothing. Returns
// what differs, or "" when they agree.
std::string disagreement(torch::ScalarType dt) {
  TorchMoe t(dt);
  SigmaMoe s(dt);
  t.permute();
  if (!torch::equal(t.out, s.permuted)) return "permute differs from libtorch's";
  s.unpermute();
  // A weighted sum of K=2 rows, added in another order and, for bf16,
  // rounded at other points: a few units in the last place.
  const double rtol = dt == torch::kFloat ? 1e-5 : 3 * 0.0078125;
  const double atol = dt == torch::kFloat ? 1e-6 : 1e-2;
  for (const auto& form : kUnpermuteForms) {
    t.unpermute(form);
    if (!torch::allclose(t.back.to(torch::kFloat), s.out.to(torch::kFloat), rtol, atol))
      return "unpermute differs from libtorch's " + form + " form (max abs difference " +
             std::to_string((t.back.to(torch::kFloat) - s.out.to(torch::kFloat)).abs().max().item<double>()) +
             ")";
  }
  return "";
}

void BM_Torch(benchmark::State& state, torch::ScalarType dt, const std::string& form) {
  TorchMoe t(dt);
  for (auto _ : state) {
    if (form == "permute")
      t.permute();
    else
      t.unpermute(form);
    benchmark::DoNotOptimize(t.out.data_ptr());
    benchmark::DoNotOptimize(t.back.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kTokens * kTopK * kHidden * t.in.tokens.element_size());
}

void BM_Sigma(benchmark::State& state, torch::ScalarType dt, bool unpermute, bool dst16) {
  SigmaMoe s(dt, dst16);
  for (auto _ : state) {
    if (unpermute)
      s.unpermute();
    else
      s.permute();
    benchmark::DoNotOptimize(s.permuted.data_ptr());
    benchmark::DoNotOptimize(s.out.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * kTokens * kTopK * kHidden * s.in.tokens.element_size());
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
    const std::string why = disagreement(dt);
    if (!why.empty()) {
      std::fprintf(stderr, "bench_moe: %s: %s; nothing timed\n", dt == torch::kFloat ? "f32" : "bf16",
                   why.c_str());
      return 1;
    }
  }
  std::printf("outputs checked: sigma and every libtorch form agree (f32, bf16)\n");
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    const std::string d = dt == torch::kFloat ? "f32" : "bf16";
    benchmark::RegisterBenchmark(("torch/permute/" + d).c_str(), BM_Torch, dt, std::string("permute"))
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("sigma/permute/" + d).c_str(), BM_Sigma, dt, false, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("sigma/permute_dst16/" + d).c_str(), BM_Sigma, dt, false, true)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (const auto& form : kUnpermuteForms)
      benchmark::RegisterBenchmark(("torch/unpermute/" + d + "/" + form).c_str(), BM_Torch, dt, form)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("sigma/unpermute/" + d).c_str(), BM_Sigma, dt, true, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  Table t;
  benchmark::RunSpecifiedBenchmarks(&t);
  std::printf("\n%-18s %10s %-10s %10s %8s\n", "op", "torch ms", "(form)", "sigma ms", "speedup");
  for (const char* d : {"f32", "bf16"})
    for (const char* op : {"permute", "permute_dst16", "unpermute"}) {
      const std::string mine = std::string(op) + "/" + d;
      // permute_dst16 against libtorch's permute (its own, aligned, output).
      const std::string key = (std::string(op) == "permute_dst16" ? "permute" : op) + std::string("/") + d;
      auto b = t.seconds.find("sigma/" + mine);
      // The peer at its best: the fastest libtorch form.
      std::string best_form;
      double best = 0;
      for (const auto& [name, sec] : t.seconds) {
        if (name.rfind("torch/" + key, 0) != 0) continue;
        if (best_form.empty() || sec < best) {
          best = sec;
          best_form = name.size() > key.size() + 6 ? name.substr(key.size() + 7) : "-";
        }
      }
      if (best_form.empty() || b == t.seconds.end()) continue;
      std::printf("%-18s %10.2f %-10s %10.2f %7.2fx\n", mine.c_str(), best, best_form.c_str(), b->second,
                  best / b->second);
    }
  return 0;
}
