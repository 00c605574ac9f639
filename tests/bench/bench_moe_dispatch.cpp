// MoE dispatch end to end on two ranks: sigma::parallel (route, plan,
// dispatch, combine) against libtorch over the same HAL collectives, twice:
//  - straightforward libtorch, as one would write it: softmax + topk, a
//    stable argsort and index_select to permute, bincount and an
//    all-to-all of the counts, all-to-all(v) of every row (its own rank's
//    included), index_select to regroup by expert and index_copy_ back, and
//    index_add_ with the weights to combine, fresh tensors per call (its
//    CPU allocator);
//  - libtorch's best, given sigma's tricks where libtorch can express them
//    (torch_best below): every tensor kept and written in place or through
//    `_out` ops, routing included; own rows gathered straight into the
//    expert layout and never sent; the crossing rows exchanged in rounds,
//    one all-to-all(v) per local expert, landing in place, so that nothing
//    is regrouped by copy.
// Sigma's Dispatcher keeps its exchange buffers and the caller keeps its
// output. Identity experts in the timed runs, so what is timed is the
// routing, the index work and the exchange; the agreement check scales each
// expert's rows by its id on both sides, so it sees where every row went;
// both outputs are checked to agree before anything is timed. Dropless
// top-2 of 8 experts, f32; 8192 tokens per rank at hidden 1024 and 256. One
// thread per rank on each side (two ranks share two cores; libtorch is told
// so). The two paths run in interleaved blocks. A first row times the
// all-to-all(v)s of the crossing rows alone (same counts, kept buffers)
// against libtorch's best: the bound on any speedup for a path that sends
// every crossing row through these collectives. Each comparison is one
// Google Benchmark (one iteration holding the interleaved blocks; counters
// sigma_ms, libtorch_ms, speedup); a table of all of them follows.
//
//   bench_moe_dispatch [--benchmark_filter=Reused]
#include "two_rank.hpp"

#include <sigma/bootstrap.hpp>
#include <sigma/parallel.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace {

constexpr int64_t kTokens = 8192, kExperts = 8, kTopK = 2;
constexpr uint32_t kWorld = 2;
std::unique_ptr<sigma::hal::Communicator> g_comm;
int g_rank = 0;

struct Inputs {
  torch::Tensor tokens, logits;  // [T, H] f32, [T, E] f32
};

Inputs make(int64_t hidden) {
  torch::manual_seed(7 + g_rank);
  return {torch::randn({kTokens, hidden}), torch::randn({kTokens, kExperts})};
}

void run(const hal_coll_args_t& a) { g_comm->run(a, std::chrono::seconds(120)); }

// For the agreement check only: expert e scales its rows by 1 + e on both
// sides, so a row that reached the wrong expert (or the wrong place) shows
// in the output. Identity experts would give sum(w * x) = x wherever the
// rows went. Timed runs keep identity experts.
bool g_check_experts = false;
float expert_scale(int64_t expert) { return 1.0f + static_cast<float>(expert); }

// The HAL's all-to-all(v), counts and displacements in elements of `dt`.
void alltoallv(hal_dtype_t dt, const void* send, void* recv, const std::vector<uint64_t>& sc,
               const std::vector<uint64_t>& sd, const std::vector<uint64_t>& rc,
               const std::vector<uint64_t>& rd) {
  auto a = sigma::hal::coll_args(HAL_COLL_ALL_TO_ALLV, dt, 0, send, recv);
  a.send_counts = sc.data();
  a.send_displs = sd.data();
  a.recv_counts = rc.data();
  a.recv_displs = rd.data();
  run(a);
}

// f32 rows of tensors.
void alltoallv(const torch::Tensor& send, torch::Tensor& recv, const std::vector<uint64_t>& sc,
               const std::vector<uint64_t>& sd, const std::vector<uint64_t>& rc,
               const std::vector<uint64_t>& rd) {
  alltoallv(HAL_DTYPE_F32, send.data_ptr(), recv.data_ptr(), sc, sd, rc, rd);
}

// The libtorch way, with the HAL's collectives for the exchange.
torch::Tensor torch_dispatch_combine(const Inputs& in) {
  const int64_t hidden = in.tokens.size(1), local = kExperts / kWorld;
  auto probs = torch::softmax(in.logits, 1);
  auto [w, ids] = probs.topk(kTopK, 1);
  w = w / w.sum(1, true);
  auto flat = ids.flatten();
  auto order = std::get<1>(flat.sort(c10::optional<bool>(true), /*dim=*/0, /*descending=*/false));
  auto source = torch::floor_divide(order, kTopK);
  auto permuted = torch::empty({source.size(0), hidden});
  torch::index_select_out(permuted, in.tokens, 0, source);
  auto counts = torch::bincount(flat, {}, kExperts).contiguous();  // int64 per expert
  auto recv_counts = torch::empty_like(counts);
  run(sigma::hal::coll_args(HAL_COLL_ALL_TO_ALL, HAL_DTYPE_I64, local, counts.data_ptr(),
                            recv_counts.data_ptr()));
  std::vector<uint64_t> sc(kWorld), sd(kWorld), rc(kWorld), rd(kWorld);
  auto cs = counts.view({kWorld, local}).sum(1), rs = recv_counts.view({kWorld, local}).sum(1);
  uint64_t s_at = 0, r_at = 0;
  for (uint32_t j = 0; j < kWorld; ++j) {
    sc[j] = static_cast<uint64_t>(cs[j].item<int64_t>()) * hidden;
    rc[j] = static_cast<uint64_t>(rs[j].item<int64_t>()) * hidden;
    sd[j] = s_at;
    rd[j] = r_at;
    s_at += sc[j];
    r_at += rc[j];
  }
  auto recv = torch::empty({static_cast<int64_t>(r_at / hidden), hidden});
  alltoallv(permuted, recv, sc, sd, rc, rd);
  // Regroup source-major rows by expert: each (source, expert) segment's
  // row indices, expert-major.
  auto rcv = recv_counts.view({kWorld, local});
  auto starts = torch::cumsum(rcv.flatten(), 0) - rcv.flatten();
  std::vector<torch::Tensor> pieces;
  for (int64_t l = 0; l < local; ++l)
    for (int64_t s = 0; s < kWorld; ++s) {
      const int64_t st = starts[s * local + l].item<int64_t>(), n = rcv[s][l].item<int64_t>();
      pieces.push_back(torch::arange(st, st + n));
    }
  auto by_expert = torch::cat(pieces);
  auto expert_in = torch::empty({by_expert.size(0), hidden});
  torch::index_select_out(expert_in, recv, 0, by_expert);
  auto expert_out = expert_in;  // identity experts, except for the check
  if (g_check_experts) {
    std::vector<float> scale;
    for (int64_t l = 0; l < local; ++l) {
      int64_t n = 0;
      for (int64_t s = 0; s < kWorld; ++s) n += rcv[s][l].item<int64_t>();
      scale.insert(scale.end(), static_cast<size_t>(n), expert_scale(g_rank * local + l));
    }
    expert_out = expert_in * torch::from_blob(scale.data(), {static_cast<int64_t>(scale.size()), 1}).clone();
  }
  auto back_src = torch::empty({recv.size(0), hidden});
  back_src.index_copy_(0, by_expert, expert_out);
  auto back = torch::empty({permuted.size(0), hidden});
  alltoallv(back_src, back, rc, rd, sc, sd);
  auto weighted = torch::empty({back.size(0), hidden});
  torch::mul_out(weighted, back, w.flatten().index_select(0, order).unsqueeze(1));
  auto out = torch::empty({kTokens, hidden});
  out.zero_();
  out.index_add_(0, source, weighted);
  return out;
}

// libtorch's best, with sigma's tricks where libtorch can express them:
// every tensor kept from call to call and written in place or through
// `_out` ops (routing included), the rows for this rank's own experts
// gathered straight into the expert layout and never sent, and the rows
// that cross exchanged in rounds, one all-to-all(v) per local expert each
// way, landing at their place (expert-major going, back where they came
// from returning), so that nothing is regrouped by copy. Sigma takes rounds
// above 1 MiB a round (DispatchOptions::round_min_bytes); every shape timed
// here is far above it, so this side always takes them.
struct Best {
  torch::Tensor probs, w, ids, wsum, sorted, order, top_k, source, wsorted, ones, counts, recv_counts;
  torch::Tensor sent, expert_in, out;
  std::vector<int64_t> first;  // where each expert's rows start in the sorted order, per expert + 1
};

torch::Tensor& kept(torch::Tensor& t, at::IntArrayRef shape, at::ScalarType type) {
  if (!t.defined() || t.sizes() != shape || t.scalar_type() != type) t = torch::empty(shape, type);
  return t;
}

torch::Tensor torch_best(const Inputs& in, Best& b) {
  const int64_t hidden = in.tokens.size(1), local = kExperts / kWorld, me = g_rank;
  const int64_t rows = kTokens * kTopK;
  torch::softmax_out(kept(b.probs, {kTokens, kExperts}, torch::kFloat), in.logits, 1);
  kept(b.w, {kTokens, kTopK}, torch::kFloat);
  kept(b.ids, {kTokens, kTopK}, torch::kLong);
  torch::topk_out(b.w, b.ids, b.probs, kTopK, 1);
  torch::sum_out(kept(b.wsum, {kTokens, 1}, torch::kFloat), b.w, 1, true);
  b.w.div_(b.wsum);
  const auto flat = b.ids.view({rows});
  kept(b.sorted, {rows}, torch::kLong);
  kept(b.order, {rows}, torch::kLong);
  torch::sort_out(b.sorted, b.order, flat, /*stable=*/true, 0, false);
  if (!b.top_k.defined()) b.top_k = torch::full({}, kTopK, torch::kLong);
  torch::floor_divide_out(kept(b.source, {rows}, torch::kLong), b.order, b.top_k);
  if (!b.ones.defined()) b.ones = torch::ones({rows}, torch::kLong);
  kept(b.counts, {kExperts}, torch::kLong).zero_();
  b.counts.index_add_(0, flat, b.ones);
  kept(b.recv_counts, {kExperts}, torch::kLong);
  run(sigma::hal::coll_args(HAL_COLL_ALL_TO_ALL, HAL_DTYPE_I64, local, b.counts.data_ptr(),
                            b.recv_counts.data_ptr()));
  const int64_t* cnt = b.counts.data_ptr<int64_t>();
  const int64_t* rcv = b.recv_counts.data_ptr<int64_t>();  // [source][local expert]
  b.first.assign(kExperts + 1, 0);
  for (int64_t e = 0; e < kExperts; ++e) b.first[e + 1] = b.first[e] + cnt[e];
  // The expert layout: local expert l's rows from source 0, 1, ...; own rows
  // in their source's place.
  std::vector<int64_t> at(kWorld * local + 1, 0);  // [l][s] start in expert_in
  for (int64_t l = 0, k = 0; l < local; ++l)
    for (int64_t s = 0; s < kWorld; ++s, ++k)
      at[k + 1] = at[k] + (s == me ? cnt[me * local + l] : rcv[s * local + l]);
  auto& expert_in = kept(b.expert_in, {at.back(), hidden}, torch::kFloat);
  // Rows for other ranks, gathered in the sorted order (their own
  // positions kept empty); own rows straight into the expert layout.
  auto& sent = kept(b.sent, {rows, hidden}, torch::kFloat);
  for (int64_t j = 0; j < kWorld; ++j) {
    const int64_t lo = b.first[j * local], n = b.first[(j + 1) * local] - lo;
    if (j == me) continue;
    auto dst = sent.narrow(0, lo, n);
    torch::index_select_out(dst, in.tokens, 0, b.source.narrow(0, lo, n));
  }
  for (int64_t l = 0; l < local; ++l) {
    const int64_t lo = b.first[me * local + l], n = cnt[me * local + l];
    auto dst = expert_in.narrow(0, at[l * kWorld + me], n);
    torch::index_select_out(dst, in.tokens, 0, b.source.narrow(0, lo, n));
  }
  const auto h = static_cast<uint64_t>(hidden);
  std::vector<uint64_t> sc(kWorld), sd(kWorld), rc(kWorld), rd(kWorld);
  auto round = [&](int64_t l, bool going) {
    for (int64_t j = 0; j < kWorld; ++j) {
      const int64_t e = j * local + l;  // peer j's l-th expert, in this rank's sorted rows
      const bool self = j == me;
      sc[j] = self ? 0 : static_cast<uint64_t>(cnt[e]) * h;
      sd[j] = static_cast<uint64_t>(b.first[e]) * h;
      rc[j] = self ? 0 : static_cast<uint64_t>(rcv[j * local + l]) * h;
      rd[j] = static_cast<uint64_t>(at[l * kWorld + j]) * h;
    }
    if (going)
      alltoallv(HAL_DTYPE_F32, sent.data_ptr(), expert_in.data_ptr(), sc, sd, rc, rd);
    else
      alltoallv(HAL_DTYPE_F32, expert_in.data_ptr(), sent.data_ptr(), rc, rd, sc, sd);
  };
  for (int64_t l = 0; l < local; ++l) round(l, true);
  if (g_check_experts)  // identity experts, except for the check
    for (int64_t l = 0; l < local; ++l)
      expert_in.narrow(0, at[l * kWorld], at[(l + 1) * kWorld] - at[l * kWorld])
          .mul_(expert_scale(me * local + l));
  for (int64_t l = 0; l < local; ++l) round(l, false);
  // Combine: each row weighted in place, then added into its token.
  auto& out = kept(b.out, {kTokens, hidden}, torch::kFloat);
  out.zero_();
  torch::index_select_out(kept(b.wsorted, {rows}, torch::kFloat), b.w.view({rows}), 0, b.order);
  auto add = [&](torch::Tensor rows_, int64_t lo, int64_t n) {
    rows_.mul_(b.wsorted.narrow(0, lo, n).unsqueeze(1));
    out.index_add_(0, b.source.narrow(0, lo, n), rows_);
  };
  for (int64_t j = 0; j < kWorld; ++j) {
    const int64_t lo = b.first[j * local], n = b.first[(j + 1) * local] - lo;
    if (j != me) add(sent.narrow(0, lo, n), lo, n);
  }
  for (int64_t l = 0; l < local; ++l)
    add(expert_in.narrow(0, at[l * kWorld + me], cnt[me * local + l]), b.first[me * local + l],
        cnt[me * local + l]);
  return out;
}

// The floor of both paths: only the two all-to-all(v)s of rows that each
// must make, with the same counts, on kept buffers. Nothing that uses these
// collectives can be faster than this.
struct Exchange {
  std::vector<uint64_t> sc, sd, rc, rd;
  torch::Tensor send, recv;
};

Exchange exchange_of(const Inputs& in) {
  const int64_t hidden = in.tokens.size(1), local = kExperts / kWorld;
  auto [w, ids] = torch::softmax(in.logits, 1).topk(kTopK, 1);
  auto counts = torch::bincount(ids.flatten(), {}, kExperts).contiguous();
  auto recv_counts = torch::empty_like(counts);
  run(sigma::hal::coll_args(HAL_COLL_ALL_TO_ALL, HAL_DTYPE_I64, local, counts.data_ptr(),
                            recv_counts.data_ptr()));
  Exchange x{std::vector<uint64_t>(kWorld),
             std::vector<uint64_t>(kWorld),
             std::vector<uint64_t>(kWorld),
             std::vector<uint64_t>(kWorld),
             {},
             {}};
  auto cs = counts.view({kWorld, local}).sum(1), rs = recv_counts.view({kWorld, local}).sum(1);
  uint64_t s_at = 0, r_at = 0;
  for (uint32_t j = 0; j < kWorld; ++j) {
    const bool self = j == static_cast<uint32_t>(g_rank);  // own rows never travel, on either side
    x.sc[j] = self ? 0 : static_cast<uint64_t>(cs[j].item<int64_t>()) * hidden;
    x.rc[j] = self ? 0 : static_cast<uint64_t>(rs[j].item<int64_t>()) * hidden;
    x.sd[j] = s_at;
    x.rd[j] = r_at;
    s_at += x.sc[j];
    r_at += x.rc[j];
  }
  x.send = torch::randn({static_cast<int64_t>(s_at / hidden), hidden});
  x.recv = torch::empty({static_cast<int64_t>(r_at / hidden), hidden});
  return x;
}

void exchange_only(Exchange& x) {
  alltoallv(x.send, x.recv, x.sc, x.sd, x.rc, x.rd);
  alltoallv(x.recv, x.send, x.rc, x.rd, x.sc, x.sd);
}

torch::Tensor sigma_dispatch_combine(const Inputs& in, sigma::parallel::Dispatcher& d) {
  const auto hidden = static_cast<uint64_t>(in.tokens.size(1));
  sigma::parallel::RouterOptions ro;
  ro.num_experts = kExperts;
  ro.top_k = kTopK;
  const auto routing = sigma::parallel::route(in.logits.data_ptr<float>(), kTokens, ro);
  const auto plan = d.plan(routing);
  // Reused across steps, as a training loop would (and as libtorch's best
  // side keeps its own output).
  static std::vector<uint8_t> rows;
  static torch::Tensor out;
  d.dispatch(plan, in.tokens.data_ptr(), hidden, HAL_DTYPE_F32, rows);
  if (g_check_experts) {  // each local expert's rows, scaled by its id
    auto* f = reinterpret_cast<float*>(rows.data());
    for (size_t i = 0; i < d.local_expert_ids().size(); ++i)
      for (uint64_t k = plan.expert_offsets[i] * hidden; k < plan.expert_offsets[i + 1] * hidden; ++k)
        f[k] *= expert_scale(d.local_expert_ids()[i]);
  }
  if (!out.defined() || !out.sizes().equals(in.tokens.sizes())) out = torch::empty_like(in.tokens);
  d.combine(plan, rows.data(), routing.weights.data(), hidden, HAL_DTYPE_F32,
            out.data_ptr());  // identity experts, except for the check
  return out;
}

// One comparison in interleaved blocks on the same inputs: sigma's
// dispatch + combine (or the exchange alone) against libtorch's, which
// allocates per call (fresh) or keeps every buffer (reused).
enum class Versus { exchange_only, fresh, reused };
std::map<std::pair<int64_t, int>, sigma::bench::Interleaved> g_results;
sigma::parallel::Dispatcher* g_dispatcher = nullptr;

void BM_Dispatch(benchmark::State& state, Versus versus) {
  const int64_t hidden = state.range(0);
  const Inputs in = make(hidden);
  Best best;
  // libtorch's side: straightforward (fresh tensors per call) or its best.
  const auto torch_side = [&]() -> torch::Tensor {
    return versus == Versus::fresh ? torch_dispatch_combine(in) : torch_best(in, best);
  };
  sigma::bench::Interleaved r;
  for (auto _ : state) {
    if (versus == Versus::exchange_only) {
      // The exchange alone against libtorch's best: the most any path that
      // sends every crossing row through these collectives could gain.
      Exchange x = exchange_of(in);
      torch_side();
      r = sigma::bench::interleave(
          10, 3, [&] { exchange_only(x); }, [&] { torch_side(); });
    } else {
      g_check_experts = true;
      const auto a = sigma_dispatch_combine(in, *g_dispatcher).clone();
      const auto b = torch_side();
      g_check_experts = false;
      const double diff = (a - b).abs().max().item<double>() / (1.0 + b.abs().max().item<double>());
      if (!(diff < 1e-5)) {
        std::fprintf(stderr, "rank %d: the two paths disagree by %g\n", g_rank, diff);
        std::exit(1);
      }
      r = sigma::bench::interleave(
          10, 3, [&] { sigma_dispatch_combine(in, *g_dispatcher); }, [&] { torch_side(); });
    }
    state.SetIterationTime(r.a_median);
  }
  state.counters["sigma_ms"] = r.a_median * 1e3;
  state.counters["libtorch_ms"] = r.b_median * 1e3;
  state.counters["speedup"] = r.b_median / r.a_median;
  state.counters["best_sigma_ms"] = r.a_best * 1e3;
  state.counters["best_libtorch_ms"] = r.b_best * 1e3;
  g_results[{hidden, static_cast<int>(versus)}] = r;
}

// Where sigma's time goes: route, plan, dispatch and combine timed one by
// one (medians of 30 calls), and the exchange of the rows that cross to
// the other rank alone (one all-to-all(v) each way, kept buffers) against a
// memcpy of the same bytes each way: the wire's cost against memory's.
void BM_Phases(benchmark::State& state) {
  const int64_t hidden = state.range(0);
  const Inputs in = make(hidden);
  const auto h = static_cast<uint64_t>(hidden);
  sigma::parallel::RouterOptions ro;
  ro.num_experts = kExperts;
  ro.top_k = kTopK;
  std::vector<double> t[4];
  const auto since = [](std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  std::vector<uint8_t> rows;
  torch::Tensor out = torch::empty_like(in.tokens);
  uint64_t crossing = 0;  // bytes this rank sends the other
  for (auto _ : state) {
    for (int i = 0; i < 30; ++i) {
      auto a = std::chrono::steady_clock::now();
      const auto routing = sigma::parallel::route(in.logits.data_ptr<float>(), kTokens, ro);
      t[0].push_back(since(a));
      a = std::chrono::steady_clock::now();
      const auto plan = g_dispatcher->plan(routing);
      t[1].push_back(since(a));
      a = std::chrono::steady_clock::now();
      g_dispatcher->dispatch(plan, in.tokens.data_ptr(), h, HAL_DTYPE_F32, rows);
      t[2].push_back(since(a));
      a = std::chrono::steady_clock::now();
      g_dispatcher->combine(plan, rows.data(), routing.weights.data(), h, HAL_DTYPE_F32, out.data_ptr());
      t[3].push_back(since(a));
      const uint32_t peer = 1 - static_cast<uint32_t>(g_rank), first = peer * (kExperts / kWorld);
      crossing = (plan.sent_offsets[first + kExperts / kWorld] - plan.sent_offsets[first]) * h * 4;
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Both ranks send about as much; each sizes its own block and learns the
  // peer's from the counts, as any all-to-all(v) user must.
  std::vector<uint64_t> mine{crossing}, both(kWorld);
  run(sigma::hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_I64, 1, mine.data(), both.data()));
  const uint32_t self = static_cast<uint32_t>(g_rank), peer = 1 - self;
  std::vector<uint64_t> sc(kWorld), sd(kWorld), rc(kWorld), rd(kWorld);
  sc[peer] = crossing;
  rc[peer] = both[peer];
  std::vector<uint8_t> send(std::max<uint64_t>(crossing, 1), 1), recv(std::max<uint64_t>(both[peer], 1));
  std::vector<double> wire, copy;
  for (int i = 0; i < 10; ++i) {
    auto a = std::chrono::steady_clock::now();
    alltoallv(HAL_DTYPE_U8, send.data(), recv.data(), sc, sd, rc, rd);
    alltoallv(HAL_DTYPE_U8, recv.data(), send.data(), rc, rd, sc, sd);
    wire.push_back(since(a));
    a = std::chrono::steady_clock::now();
    std::memcpy(recv.data(), send.data(), std::min(crossing, both[peer]));
    std::memcpy(send.data(), recv.data(), std::min(crossing, both[peer]));
    copy.push_back(since(a));
  }
  state.counters["route_ms"] = median(t[0]) * 1e3;
  state.counters["plan_ms"] = median(t[1]) * 1e3;
  state.counters["dispatch_ms"] = median(t[2]) * 1e3;
  state.counters["combine_ms"] = median(t[3]) * 1e3;
  state.counters["exchange_ms"] = median(wire) * 1e3;
  state.counters["memcpy_ms"] = median(copy) * 1e3;
  state.counters["crossing_MiB"] = static_cast<double>(crossing) / (1 << 20);
}

void print_table() {
  static const char* const kRow[] = {"exchange only (bound)", "fresh per call", "best (sigma's tricks)"};
  std::printf(
      "\n%-8s %-22s %10s %10s %8s %10s %10s   (ms per dispatch + combine; median block, best block)\n",
      "hidden", "libtorch buffers", "sigma", "libtorch", "speedup", "best sigma", "best torch");
  for (const auto& [key, r] : g_results)
    std::printf("%-8lld %-22s %10.2f %10.2f %7.2fx %10.2f %10.2f\n", static_cast<long long>(key.first),
                kRow[key.second], r.a_median * 1e3, r.b_median * 1e3, r.b_median / r.a_median, r.a_best * 1e3,
                r.b_best * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  g_rank = sigma::bench::start_two_ranks(argc, argv, dir);
  benchmark::Initialize(&argc, argv);
  torch::set_num_threads(1);
  auto store = std::make_shared<sigma::bootstrap::FileStore>(dir + "/hal");
  auto plugin = sigma::hal::Plugin::load("cpu");
  sigma::bootstrap::HalBootstrap bs(store, "moe/");
  hal_comm_create_args_t ca{};
  ca.struct_size = sizeof(ca);
  ca.rank = static_cast<uint32_t>(g_rank);
  ca.world_size = kWorld;
  ca.bootstrap = bs.table();
  ca.timeout_ns = 60'000'000'000ull;
  g_comm = std::make_unique<sigma::hal::Communicator>(plugin, ca);
  sigma::parallel::DispatchOptions opt;
  opt.num_experts = kExperts;
  sigma::parallel::Dispatcher d(*g_comm, static_cast<uint32_t>(g_rank), kWorld, opt);
  g_dispatcher = &d;

  for (int64_t hidden : {1024, 256}) {
    const std::pair<const char*, Versus> kinds[] = {{"MoeDispatch/ExchangeOnly", Versus::exchange_only},
                                                    {"MoeDispatch/VsLibtorchFresh", Versus::fresh},
                                                    {"MoeDispatch/VsLibtorchReused", Versus::reused}};
    for (const auto& [name, versus] : kinds)
      benchmark::RegisterBenchmark(name, BM_Dispatch, versus)->Arg(hidden)->Iterations(1)->UseManualTime();
  }
  for (int64_t hidden : {1024, 256})
    benchmark::RegisterBenchmark("MoeDispatch/SigmaPhases", BM_Phases)->Arg(hidden)->Iterations(1);
  // Both ranks run the same benchmarks (the peer gets the same arguments);
  // rank 0 reports.
  if (g_rank == 0) {
    benchmark::ConsoleReporter console;
    benchmark::RunSpecifiedBenchmarks(&console);
    print_table();
  } else {
    sigma::bench::Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  g_dispatcher = nullptr;
  g_comm.reset();
  return 0;
}
