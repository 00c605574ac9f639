#include "model.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace moe {

namespace par = sigma::parallel;

// One MoE layer's exchange: the dispatcher, and the plan both directions
// of the exchange use, forward and backward.
struct Model::Exchange {
  par::Dispatcher* dispatcher = nullptr;
  par::Plan plan;
  int64_t hidden = 0;
  std::vector<uint8_t> buffer;

  double* seconds = nullptr;  // the model's exchange time

  torch::Tensor move(const torch::Tensor& in, bool to_experts) {
    const auto t0 = std::chrono::steady_clock::now();
    const torch::Tensor src = in.contiguous();
    float dummy = 0;  // a zero-row side still takes part; it needs an address
    const void* p = src.numel() > 0 ? src.data_ptr() : &dummy;
    if (to_experts)
      dispatcher->to_experts(plan, p, static_cast<uint64_t>(hidden), HAL_DTYPE_F32, buffer);
    else
      dispatcher->from_experts(plan, p, static_cast<uint64_t>(hidden), HAL_DTYPE_F32, buffer);
    const auto rows = static_cast<int64_t>(buffer.size() / (static_cast<size_t>(hidden) * sizeof(float)));
    torch::Tensor out = torch::empty({rows, hidden});
    if (rows > 0) std::memcpy(out.data_ptr(), buffer.data(), buffer.size());
    *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tokens to their experts' ranks; backward sends the gradients home.
template <bool kToExperts>
struct Move : torch::autograd::Function<Move<kToExperts>> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, int64_t exchange) {
    ctx->saved_data["exchange"] = exchange;
    return reinterpret_cast<Model::Exchange*>(exchange)->move(rows, kToExperts);  // NOLINT
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* x = reinterpret_cast<Model::Exchange*>(ctx->saved_data["exchange"].toInt());  // NOLINT
    return {x->move(grads[0], !kToExperts), torch::Tensor()};
  }
};

}  // namespace

Model::Model(const ModelConfig& config, uint32_t ep_rank, uint32_t ep_size, int64_t slots, uint64_t seed)
    : c_(config) {
  const int64_t d = c_.d_model, L = c_.layers, E = c_.experts;
  local_ = E / ep_size;
  slots_ = std::max(slots, local_);
  const int64_t dense_count =
      c_.vocab * d + c_.seq * d + L * (2 * d + 3 * d * d + d * d + 2 * d + E * d) + 2 * d;
  dense = torch::zeros({dense_count});
  dense_grad = torch::zeros({dense_count});
  expert = torch::zeros({L * slots_ * 2 * c_.ffn * d});
  expert_grad = torch::zeros_like(expert);

  torch::manual_seed(static_cast<int64_t>(seed));
  const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(L));
  int64_t at = 0;
  auto segment = [&](const std::string& name, int64_t from) {
    dense_layers.push_back({name, from, at - from});
  };
  auto normal = [](torch::Tensor t, double s) {
    torch::NoGradGuard ng;
    t.normal_(0, s);
  };
  auto ones = [](torch::Tensor t) {
    torch::NoGradGuard ng;
    t.fill_(1);
  };
  int64_t from = at;
  embed_ = param(dense, dense_grad, at, {c_.vocab, d});
  pos_ = param(dense, dense_grad, at, {c_.seq, d});
  normal(embed_, std);
  normal(pos_, std);
  segment("embed", from);
  int64_t e_at = 0;
  for (int64_t l = 0; l < L; ++l) {
    Block b;
    from = at;
    b.ln1_w = param(dense, dense_grad, at, {d});
    b.ln1_b = param(dense, dense_grad, at, {d});
    b.qkv = param(dense, dense_grad, at, {3 * d, d});
    b.proj = param(dense, dense_grad, at, {d, d});
    ones(b.ln1_w);
    normal(b.qkv, std);
    normal(b.proj, out_std);
    segment("block" + std::to_string(l) + ".attn", from);
    from = at;
    b.ln2_w = param(dense, dense_grad, at, {d});
    b.ln2_b = param(dense, dense_grad, at, {d});
    b.router = param(dense, dense_grad, at, {E, d});
    ones(b.ln2_w);
    normal(b.router, std);
    segment("block" + std::to_string(l) + ".router", from);
    for (int64_t j = 0; j < slots_; ++j) {
      b.w1.push_back(param(expert, expert_grad, e_at, {c_.ffn, d}));
      b.w2.push_back(param(expert, expert_grad, e_at, {d, c_.ffn}));
    }
    blocks_.push_back(std::move(b));
  }
  from = at;
  lnf_w_ = param(dense, dense_grad, at, {d});
  lnf_b_ = param(dense, dense_grad, at, {d});
  ones(lnf_w_);
  segment("final_norm", from);
  TORCH_CHECK(at == dense_count && e_at == expert.numel(), "parameter layout does not add up");
  init_experts(ep_rank, ep_size, seed);
  parts_.push_back("embed");
  for (int64_t l = 0; l < L; ++l) {
    parts_.push_back("block" + std::to_string(l) + ".attn");
    parts_.push_back("block" + std::to_string(l) + ".experts");
  }
  f32_.assign(parts_.size(), false);
  amax_.assign(parts_.size(), 0.0);
}

std::vector<double> Model::take_activation_amax() {
  std::vector<double> out(parts_.size(), 0.0);
  std::swap(out, amax_);
  return out;
}

// A GEMM as an f16 tensor core computes it: operands rounded to f16,
// products summed in f32, the result (times `scale`) rounded to f16, where
// a value past 65504 becomes inf (`divisor` and `gain` scale it first).
// Autograd's backward of each rounding
// rounds the gradient flowing through it to f16 as well, so scaled
// gradients overflow and underflow as they would there. libtorch has no
// f16 GEMM on the CPU; this is its arithmetic, not its speed. An escalated
// part runs the same GEMM in f32.
torch::Tensor Model::gemm(const torch::Tensor& a, const torch::Tensor& b, size_t part, double divisor,
                          double gain) {
  const bool low = c_.f16 && !f32_[part];
  const auto round = [low](const torch::Tensor& t) { return low ? t.to(torch::kHalf).to(torch::kFloat) : t; };
  torch::Tensor y = torch::matmul(round(a), round(b));
  if (divisor != 1) y = y / divisor;
  if (gain != 1) y = y * gain;
  if (c_.f16 && y.numel() > 0) {
    const double m = y.detach().abs().max().item<double>();
    amax_[part] = std::isnan(m) ? INFINITY : std::max(amax_[part], m);
  }
  return round(y);
}

double Model::take_exchange_seconds() {
  const double s = exchange_s_;
  exchange_s_ = 0;
  return s;
}

void Model::init_experts(uint32_t ep_rank, uint32_t ep_size, uint64_t seed) {
  torch::NoGradGuard ng;
  const auto range = par::expert_range(static_cast<uint32_t>(c_.experts), ep_size, ep_rank);
  expert.zero_();
  slot_of.assign(static_cast<size_t>(c_.experts), -1);
  for (uint32_t j = 0; j < range.count; ++j) slot_of[range.first + j] = static_cast<int32_t>(j);
  const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c_.layers));
  for (size_t l = 0; l < blocks_.size(); ++l) {
    for (int64_t j = 0; j < local_; ++j) {
      // By the global expert index: the same weights whichever rank holds it.
      torch::manual_seed(static_cast<int64_t>(seed * 1000003 + l * 1000 + range.first) + j);
      blocks_[l].w1[static_cast<size_t>(j)].normal_(0, std);
      blocks_[l].w2[static_cast<size_t>(j)].normal_(0, out_std);
    }
  }
}

// A leaf parameter that is a view of `flat`, with its gradient a view of
// `grad`: autograd accumulates into the flat gradient buffer in place.
torch::Tensor Model::param(torch::Tensor& flat, torch::Tensor& grad, int64_t& at,
                           std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  torch::Tensor p = flat.narrow(0, at, n).view(shape);
  p.requires_grad_(true);
  p.mutable_grad() = grad.narrow(0, at, n).view(shape);
  at += n;
  return p;
}

torch::Tensor Model::moe_layer(const torch::Tensor& h, int64_t layer, par::Dispatcher& d, MoeStats* stats) {
  const Block& b = blocks_[static_cast<size_t>(layer)];
  const int64_t T = h.size(0), k = c_.top_k, E = c_.experts, D = c_.d_model;
  const torch::Tensor logits = torch::matmul(h, b.router.t());
  // A token whose hidden state overflowed (f16) is routed as if its logits
  // were zero; its value stays non-finite, so the loss is, and the
  // guardrails skip the step on every rank.
  const torch::Tensor frozen = torch::nan_to_num(logits.detach(), 0.0, 0.0, 0.0).contiguous();
  par::RouterOptions ro;
  ro.num_experts = static_cast<uint32_t>(E);
  ro.top_k = static_cast<uint32_t>(k);
  ro.capacity_factor = c_.capacity_factor;
  ro.normalize_top_k = false;  // Switch weights: differentiable as softmax(logits)[expert]
  const par::Routing r = par::route(frozen.data_ptr<float>(), static_cast<uint64_t>(T), ro);
  auto x = std::make_shared<Exchange>();
  x->dispatcher = &d;
  x->plan = d.plan(r);
  x->hidden = D;
  x->seconds = &exchange_s_;
  inflight_.push_back(x);
  const par::LoadStats global = d.global_stats(r.stats);

  std::vector<int64_t> source(x->plan.sent_rows()), row(static_cast<size_t>(T * k)), ids(row.size());
  std::vector<float> keep(row.size());
  for (size_t i = 0; i < row.size(); ++i) {
    const int64_t at = x->plan.row_of[i];
    row[i] = at < 0 ? 0 : at;
    keep[i] = at < 0 ? 0.0f : 1.0f;
    ids[i] = r.expert_ids[i] < 0 ? 0 : r.expert_ids[i];
    if (at >= 0) source[static_cast<size_t>(at)] = static_cast<int64_t>(i) / k;
  }
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor sent =
      h.index_select(0, torch::from_blob(source.data(), {(int64_t)source.size()}, i64).clone());
  const torch::Tensor rows = Move<true>::apply(sent, reinterpret_cast<int64_t>(x.get()));  // NOLINT
  std::vector<torch::Tensor> outs;
  const auto& here = d.local_expert_ids();  // the dispatcher's order: ascending expert
  for (size_t j = 0; j < here.size(); ++j) {
    const int32_t slot = slot_of.at(here[j]);
    TORCH_CHECK(slot >= 0, "expert ", here[j], " is placed on this rank but not held here");
    const auto lo = static_cast<int64_t>(x->plan.expert_offsets[j]);
    const auto hi = static_cast<int64_t>(x->plan.expert_offsets[j + 1]);
    const torch::Tensor seg = rows.narrow(0, lo, hi - lo);
    const auto& w1 = b.w1[static_cast<size_t>(slot)];
    const auto& w2 = b.w2[static_cast<size_t>(slot)];
    const size_t part = 2 + 2 * static_cast<size_t>(layer);
    outs.push_back(gemm(torch::gelu(gemm(seg, w1.t(), part)), w2.t(), part));
  }
  // A rank holding no expert still passes its (empty) rows on: both
  // exchanges' backward passes must run on every rank.
  if (outs.empty()) outs.push_back(rows);
  const torch::Tensor back =
      Move<false>::apply(torch::cat(outs), reinterpret_cast<int64_t>(x.get()));  // NOLINT

  const torch::Tensor probs = torch::softmax(logits, 1);
  const torch::Tensor w = probs.gather(1, torch::from_blob(ids.data(), {T, k}, i64).clone()).reshape({-1}) *
                          torch::from_blob(keep.data(), {T * k}).clone();
  torch::Tensor y;
  if (back.size(0) == 0) {
    y = torch::zeros({T, D}) + back.sum() * 0;  // keeps the exchange's backward in every rank's graph
  } else {
    const torch::Tensor picked = back.index_select(0, torch::from_blob(row.data(), {T * k}, i64).clone());
    y = (picked * w.unsqueeze(1)).view({T, k, D}).sum(1);
  }
  // Switch load balancing: E * sum_i f_i * P_i, f counted before capacity
  // over the whole group, P this rank's mean router probability.
  std::vector<float> f(static_cast<size_t>(E));
  const double denom = std::max<double>(1.0, static_cast<double>(global.num_tokens) * static_cast<double>(k));
  for (int64_t e = 0; e < E; ++e) f[static_cast<size_t>(e)] = static_cast<float>(global.routed[e] / denom);
  const torch::Tensor aux =
      static_cast<double>(E) * (torch::from_blob(f.data(), {E}).clone() * probs.mean(0)).sum();
  stats->tokens += static_cast<uint64_t>(T);
  stats->routed += static_cast<uint64_t>(T * k);
  stats->dropped += r.stats.dropped();
  stats->aux += global.aux_loss() / static_cast<double>(c_.layers);
  aux_terms_.push_back(aux);
  return y;
}

torch::Tensor Model::loss(const torch::Tensor& batch, par::Dispatcher& d, MoeStats* stats,
                          torch::Tensor* cross_entropy) {
  inflight_.clear();  // the previous step's backward is done
  const int64_t B = batch.size(0), S = c_.seq, D = c_.d_model, H = c_.heads, dh = D / H;
  const torch::Tensor input = batch.narrow(1, 0, S), target = batch.narrow(1, 1, S);
  torch::Tensor x = embed_.index_select(0, input.reshape({-1})).view({B, S, D}) + pos_.unsqueeze(0);
  const torch::Tensor mask = torch::ones({S, S}, torch::kBool).triu(1);
  aux_terms_.clear();
  for (int64_t l = 0; l < c_.layers; ++l) {
    const Block& b = blocks_[static_cast<size_t>(l)];
    const torch::Tensor h = torch::layer_norm(x, {D}, b.ln1_w, b.ln1_b);
    const size_t part = 1 + 2 * static_cast<size_t>(l);
    const auto qkv = gemm(h, b.qkv.t(), part).view({B, S, 3, H, dh}).permute({2, 0, 3, 1, 4});
    const double gain = l == gain_layer_ ? gain_ : 1.0;
    torch::Tensor att =
        gemm(qkv[0], qkv[1].transpose(-2, -1), part, std::sqrt(static_cast<double>(dh)), gain);
    att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
    const torch::Tensor y = gemm(att, qkv[2], part).transpose(1, 2).reshape({B, S, D});
    x = x + gemm(y, b.proj.t(), part);
    const torch::Tensor h2 = torch::layer_norm(x, {D}, b.ln2_w, b.ln2_b).reshape({B * S, D});
    x = x + moe_layer(h2, l, d, stats).view({B, S, D});
  }
  const torch::Tensor h = torch::layer_norm(x, {D}, lnf_w_, lnf_b_);
  const torch::Tensor logits = gemm(h, embed_.t(), 0).view({B * S, c_.vocab});
  const torch::Tensor ce = torch::nn::functional::cross_entropy(logits, target.reshape({-1}));
  *cross_entropy = ce.detach();
  return ce + c_.aux_weight * torch::stack(aux_terms_).mean();
}

}  // namespace moe
