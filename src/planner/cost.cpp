// The cost model: FLOPs, memory and the time of one step for one layout.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include "memory.hpp"
#include "shape.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace sigma::planner {

namespace {

using detail::Shape;

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(Code::invalid_argument, "planner: " + what);
}

// What the devices deliver: GEMM rates in FLOP/s, link rates in bytes/s,
// latencies in seconds.
struct Rates {
  double bf16 = 0, fp8 = 0, intra = 0, inter = 0, lat_in = 0, lat_out = 0;
};

Rates rates_of(const Devices& d, const Efficiency& eff) {
  Rates r;
  r.bf16 = (d.gemm_tflops > 0 ? d.gemm_tflops : eff.gemm * d.peak_tflops) * 1e12;
  r.fp8 = d.fp8_gemm_tflops > 0 ? d.fp8_gemm_tflops * 1e12 : 2 * r.bf16;
  const double link = d.links_measured ? 1.0 : eff.link;
  r.intra = d.intra_gbps * 1e9 * link;
  r.inter = d.inter_gbps * 1e9 * link;
  r.lat_in = d.intra_latency_us > 0 ? d.intra_latency_us * 1e-6 : eff.latency_s;
  r.lat_out = d.inter_latency_us > 0 ? d.inter_latency_us * 1e-6 : eff.latency_s;
  return r;
}

// Seconds of one device's FLOPs for the step, the recomputed forward
// included. The routed experts' token counts round up to whole GEMM tiles.
double compute_seconds(const Model& m, const Shape& s, const Devices& d, const Layout& l, const Framework& f,
                       const Rates& r, const Efficiency& eff, double tokens) {
  const double per_device = tokens / d.count;
  const double linear = 6 * s.linear_active * per_device, routed = 6 * s.routed_active * per_device;
  const double other = 6 * s.bf16_active * per_device,
               attention = 6 * s.layers * m.seq * s.score_width * per_device;
  double extra = 0;
  if (l.recompute == Recompute::full) extra = (linear + other + attention) / 3;
  if (l.recompute == Recompute::selective) extra = attention / 3;
  if (d.model_tflops > 0) return (linear + other + attention + extra) / (d.model_tflops * 1e12);
  double tile = 1;
  if (m.experts > 1) {
    // Tokens one expert gets per micro-batch: each expert-parallel rank's
    // (sequence parallelism splits them over TP ranks when folded).
    const double per_rank = static_cast<double>(l.micro_batch) * m.seq / l.cp / (f.moe_folding ? l.tp : 1);
    const double per_expert = per_rank * l.ep * m.top_k / m.experts;
    tile = std::ceil(per_expert / eff.gemm_tile) * eff.gemm_tile / per_expert;
  }
  const double linear_rate = m.fp8 ? r.fp8 : r.bf16;
  const double width = m.expert_ffn ? m.expert_ffn : m.ffn;
  const double narrow = (width + eff.expert_width) / width;
  const double gemm = (linear - routed + routed * tile * narrow) / linear_rate + (other + attention) / r.bf16;
  const double recomputed = l.recompute == Recompute::full ? gemm / 3 : extra / r.bf16;
  return (gemm + recomputed) * (1 + eff.non_gemm);
}

// Seconds of one all-to-all of the micro-batch's routed copies, one way.
// Within a node: over its links. Across nodes: the remote copies over the
// network (one per remote expert; with node-level dispatch one per remote
// node holding any) while the node's links forward to the experts.
double all_to_all_seconds(const Model& m, const Devices& d, const Layout& l, const Framework& f,
                          const Rates& r, double bytes_per_copy) {
  const double e = l.ep, k = m.top_k;
  const double stride = f.moe_folding ? 1.0 : static_cast<double>(l.tp) * l.cp;
  const double in_node = std::max(1.0, std::floor(d.per_node / stride));
  const double nodes = std::ceil(e / in_node);
  if (nodes <= 1) return (e - 1) / e * k * bytes_per_copy / r.intra + r.lat_in;
  // A token's experts lie on `spread` nodes: all of them, or at most
  // max_nodes with node-limited routing. A copy crosses the network per
  // remote expert; with node-level dispatch, per distinct remote node (of
  // k uniform picks).
  const double spread = m.max_nodes ? std::min<double>(m.max_nodes, nodes) : nodes;
  const double remote = (spread - 1) / spread;
  double crossing = k * remote;
  if (f.node_dispatch) crossing = spread * (1 - std::pow(1 - 1 / spread, k)) * remote;
  const double forwarded = k * (in_node - 1) / in_node;
  return std::max(crossing * bytes_per_copy / r.inter, forwarded * bytes_per_copy / r.intra) + r.lat_out;
}

// A ring all-reduce of `bytes` over `ranks`, `in_node` of them sharing a
// node: reduce-scatter inside, all-reduce of the shards between nodes,
// all-gather inside.
double gradient_seconds(double bytes, double ranks, double in_node, const Rates& r) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double d_in = std::max(1.0, std::min(ranks, in_node)), n_out = std::ceil(ranks / d_in);
  return 2 * (d_in - 1) / d_in * bytes / r.intra + 2 * (n_out - 1) / n_out * bytes / d_in / r.inter +
         (d_in > 1 ? r.lat_in : 0) + (n_out > 1 ? r.lat_out : 0);
}

// A synchronous exchange among `ranks` waits for the slowest of them.
double noisy(double seconds, double noise, double ranks) {
  return ranks > 1 && noise > 0 ? seconds * (1 + noise * std::sqrt(2 * std::log(ranks))) : seconds;
}

// Each level's exchanges on noisy links wait for their slowest rank.
void add_link_noise(Score& sc, const Devices& d, const Layout& l, const Framework& f) {
  const double in_node = std::floor(d.per_node / (static_cast<double>(l.tp) * l.cp));
  const auto noise = [&](bool crosses) { return crosses ? d.inter_noise : d.intra_noise; };
  sc.tp_s = noisy(sc.tp_s, noise(l.tp > d.per_node), l.tp);
  sc.cp_s = noisy(sc.cp_s, noise(l.tp * l.cp > d.per_node), l.cp);
  sc.ep_s = noisy(sc.ep_s, noise(l.ep > (f.moe_folding ? d.per_node : in_node)), l.ep);
  sc.pp_s = noisy(sc.pp_s, noise(static_cast<uint64_t>(l.tp) * l.cp * l.dp >= d.per_node), 2);
}

// The gradient exchange before overlap: dense gradients over every
// data-parallel rank, the experts' over the ranks holding the same experts.
double data_parallel_seconds(const Model& m, const Shape& s, const Devices& d, const Layout& l,
                             const Framework& f, const Rates& r) {
  const detail::Held held = detail::held_params(s, l, f);
  const double tc = static_cast<double>(l.tp) * l.cp, stride = f.moe_folding ? 1.0 : tc;
  const double dense_in = std::floor(d.per_node / tc), expert_in = std::floor(d.per_node / (stride * l.ep));
  const double dense = noisy(gradient_seconds(held.dense * m.bytes_per_param, l.dp, dense_in, r),
                             l.dp > dense_in ? d.inter_noise : d.intra_noise, l.dp);
  const double expert =
      noisy(gradient_seconds(held.expert * m.bytes_per_param, held.expert_dp, expert_in, r),
            held.expert_dp > std::max(1.0, expert_in) ? d.inter_noise : d.intra_noise, held.expert_dp);
  // Full sharding gathers the parameters again for backward.
  return (dense + expert) * (l.sharding == Sharding::full ? 1.5 : 1.0);
}

double bubble_micro_batches(const Layout& l, const Framework& f) {
  const double pp = l.pp;
  switch (f.schedule) {
    // In DeepSeek-V3's notation (its Table 2), with F the forward, B the
    // whole backward and W its weight-gradient half, of one micro-batch's
    // time: F = 1/3, B = 2/3, W = 1/3.
    case Schedule::zero_bubble:  // ZB-H1: (pp-1)(F + B - 2W)
      return (pp - 1) / 3;
    case Schedule::dualpipe:  // (pp/2 - 1)(F&B + B - 3W), F&B = F + B
      return std::max(0.0, pp / 2 - 1) * 2 / 3;
    case Schedule::one_f_one_b:
      break;
  }
  return (pp - 1) / l.vpp;
}

}  // namespace

namespace {

double flops_per_token(const Model& m, const Shape& s) {
  return 6 * (s.linear_active + s.bf16_active) + 6 * s.layers * m.seq * s.score_width;
}

}  // namespace

double model_flops_per_token(const Model& m) { return flops_per_token(m, detail::shape_of(m)); }

void check(const Model& m, const Devices& d) {
  require(m.layers > 0 && m.hidden > 0 && m.ffn > 0 && m.vocab > 0 && m.seq > 0 && m.global_batch > 0,
          "model '" + m.name + "': layers, hidden, ffn, vocab, seq and global_batch must be positive");
  require(m.heads > 0 && (m.head_dim > 0 || m.hidden % m.heads == 0),
          "model '" + m.name + "': heads must divide hidden (or head_dim be given)");
  require(m.kv_heads > 0 && m.heads % m.kv_heads == 0, "model '" + m.name + "': kv_heads must divide heads");
  require(m.experts >= 1 && m.top_k >= 1 && m.top_k <= m.experts,
          "model '" + m.name + "': top_k in [1, experts]");
  require(m.dense_layers <= m.layers, "model '" + m.name + "': dense_layers more than the layers");
  require(m.mla.kv_lora == 0 || (m.mla.qk_nope + m.mla.qk_rope > 0 && m.mla.v_head > 0),
          "model '" + m.name + "': mla needs qk_nope or qk_rope, and v_head");
  require(m.bytes_per_param > 0, "model '" + m.name + "': bytes_per_param must be positive");
  require(d.count > 0 && d.per_node > 0, "devices: count and per_node must be positive");
  require(d.peak_tflops > 0 && d.memory_gib > 0 && d.intra_gbps > 0 && d.inter_gbps > 0,
          "devices: peak_tflops, memory_gib, intra_gbps and inter_gbps must be positive");
}

Score evaluate(const Model& m, const Devices& d, const Layout& l, const Framework& f, const Efficiency& eff) {
  check(m, d);
  require(l.tp && l.pp && l.dp && l.ep && l.cp && l.vpp && l.micro_batch, "every layout degree must be >= 1");
  require(d.spares == 0, "evaluate prices the devices a layout covers: give spares to search");
  require(static_cast<uint64_t>(l.pp) * l.vpp <= m.layers + m.mtp_depth,
          describe(l) + ": more pipeline stages than layers");
  require(f.schedule != Schedule::dualpipe || l.pp == 1 || l.pp % 2 == 0,
          describe(l) + ": DualPipe pairs its stages, so pp must be even");
  require(static_cast<uint64_t>(l.tp) * l.pp * l.dp * l.cp == d.count,
          describe(l) + " covers " + std::to_string(static_cast<uint64_t>(l.tp) * l.pp * l.dp * l.cp) +
              " devices, not " + std::to_string(d.count));
  const Shape s = detail::shape_of(m);
  const Rates r = rates_of(d, eff);
  const double B = static_cast<double>(m.global_batch), seq = m.seq, h = m.hidden;
  const double t = l.tp, pp = l.pp, v = l.vpp, c = l.cp;
  const double micro = std::ceil(B / l.dp / l.micro_batch), tokens = B * seq;

  Score sc;
  sc.compute_s = compute_seconds(m, s, d, l, f, r, eff, tokens) / (1 - f.comm_sm_share);
  const double act = l.micro_batch * seq * h * m.bytes_per_param / c;  // one micro-batch's hidden states
  if (l.tp > 1) {
    const double reduces = (4.0 + (l.recompute == Recompute::full ? 2 : 0)) / (m.parallel_block ? 2 : 1);
    const bool in = l.tp <= d.per_node;
    // Folded MoE layers run their experts without TP: their FFN's two
    // reduces are the all-to-alls' (priced below).
    const double layers = f.moe_folding ? s.layers - s.moe_layers / 2 : s.layers;
    sc.tp_s = layers / pp * micro * reduces *
              (2 * (t - 1) / t * act / (in ? r.intra : r.inter) + (in ? r.lat_in : r.lat_out));
  }
  if (l.cp > 1) {
    const bool in = l.tp * l.cp <= d.per_node;
    sc.cp_s =
        s.layers / pp * micro * 3 *
        ((c - 1) / c * act * s.kv_width / h / t / (in ? r.intra : r.inter) + (in ? r.lat_in : r.lat_out));
  }
  if (l.ep > 1) {
    // Four exchanges of the routed copies (to the experts and back, forward
    // and backward; FP8 training dispatches forward in one byte) and two small
    // ones before them: the per-expert counts an all-to-all(v) needs and the
    // load statistics of the auxiliary loss. Sequence parallelism splits
    // the micro-batch's tokens over the TP ranks.
    const double copy = act / t;
    const double exchanges = 3 * all_to_all_seconds(m, d, l, f, r, copy) +
                             all_to_all_seconds(m, d, l, f, r, m.fp8 ? copy / m.bytes_per_param : copy);
    const bool in = std::ceil(l.ep * (f.moe_folding ? 1.0 : t * c) / d.per_node) <= 1;
    sc.ep_s = s.moe_layers / pp * micro * (exchanges + 2 * (in ? r.lat_in : r.lat_out));
  }
  if (l.pp > 1) {
    const bool out = static_cast<uint64_t>(l.tp) * l.cp * l.dp >= d.per_node;
    const double bw = out ? r.inter : r.intra, lat = out ? r.lat_out : r.lat_in;
    sc.pp_s = f.blocking_p2p ? micro * 4 * (act / bw + lat) : micro * v * 2 * (act / t / bw + lat);
    if (f.p2p_overlap) sc.pp_s /= micro;  // only the warm-up's first send waits
  }
  add_link_noise(sc, d, l, f);
  if (f.schedule == Schedule::dualpipe || f.ep_overlap) {
    // One micro-batch's all-to-alls (and DualPipe's sends) run under
    // another's compute.
    const double pp_hidden = f.schedule == Schedule::dualpipe ? sc.pp_s : 0;
    const double comm = sc.ep_s + pp_hidden, hidden = std::min(comm, sc.compute_s);
    if (comm > 0) {
      sc.ep_s *= 1 - hidden / comm;
      sc.pp_s -= pp_hidden * hidden / comm;
    }
  }
  // The stage with the most layers sets the pace: with unequal stages
  // allowed that is ceil(layers / pp) of them; otherwise the layers divide.
  const double uneven = std::ceil(s.layers / pp) * pp / s.layers;
  const double per_micro = (sc.compute_s + sc.tp_s + sc.cp_s + sc.ep_s) / micro * uneven;
  if (l.pp > 1) sc.bubble_s = bubble_micro_batches(l, f) * per_micro;
  sc.dp_s = data_parallel_seconds(m, s, d, l, f, r) * (1 - f.dp_overlap);
  // The breakdown is of the step: compute and the per-layer exchanges stretched by uneven stages.
  sc.compute_s *= uneven;
  sc.tp_s *= uneven;
  sc.cp_s *= uneven;
  sc.ep_s *= uneven;
  sc.step_s = per_micro * micro + sc.bubble_s + sc.pp_s + sc.dp_s;
  sc.mfu = flops_per_token(m, s) * tokens / (sc.step_s * d.count * d.peak_tflops * 1e12);
  sc.tokens_per_s = tokens / sc.step_s;
  const double bytes = detail::memory_bytes(m, s, l, f);
  sc.memory_gib = bytes / double(1ull << 30);
  sc.fits = bytes <= eff.memory_usable * d.memory_gib * double(1ull << 30);
  return sc;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::none:
      return "none";
    case Sharding::optimizer:
      return "optimizer";
    case Sharding::full:
      return "full";
  }
  return "?";
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::zero_bubble:
      return "zero_bubble";
    case Schedule::dualpipe:
      return "dualpipe";
  }
  return "?";
}

std::string describe(const Layout& l) {
  return "tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp) + " dp" + std::to_string(l.dp) + " ep" +
         std::to_string(l.ep) + " cp" + std::to_string(l.cp) + " v" + std::to_string(l.vpp) + " mb" +
         std::to_string(l.micro_batch) + " recompute=" + recompute_name(l.recompute) +
         " shard=" + sharding_name(l.sharding);
}

}  // namespace sigma::planner
