// The cost model: FLOPs, memory and the time of one step for one layout.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace sigma::planner {

namespace {

struct Params {
  double attention = 0;  // per layer, matmul parameters of attention
  double ffn = 0;        // per layer, of one expert (or the dense FFN)
  double embedding = 0;  // input embedding and output projection (untied)
};

Params params_of(const Model& m) {
  const double h = m.hidden, kv_width = static_cast<double>(m.hidden) * m.kv_heads / m.heads;
  Params p;
  p.attention = 2 * h * h + 2 * h * kv_width;
  p.ffn = (m.gated_ffn ? 3.0 : 2.0) * h * m.ffn;
  p.embedding = 2 * h * m.vocab;
  return p;
}

// Activation bytes one layer keeps for backward, per micro-batch, on one
// device (Korthikanti et al., with sequence parallelism when tp > 1).
double activation_bytes(const Model& m, const Layout& l, bool flash) {
  const double sbh = static_cast<double>(m.seq) * l.micro_batch * m.hidden / l.cp;
  switch (l.recompute) {
    case Recompute::full:
      return 2 * sbh / l.tp;
    case Recompute::selective:
      return 34 * sbh / l.tp;
    case Recompute::none:
      break;
  }
  // Without FlashAttention the softmax scores (and their dropout mask) stay.
  return sbh * (34 + (flash ? 0 : 5.0 * m.heads * m.seq / l.cp / m.hidden)) / l.tp;
}

// The parameters one device holds: dense ones split over tp x pp, expert
// ones over tp x pp x ep.
double params_on_device(const Model& m, const Layout& l, const Params& p) {
  const double dense = m.layers * p.attention + p.embedding + (m.experts == 1 ? m.layers * p.ffn : 0);
  const double expert = m.experts == 1 ? 0 : static_cast<double>(m.layers) * m.experts * p.ffn;
  return dense / (l.tp * l.pp) + expert / (static_cast<double>(l.tp) * l.pp * l.ep);
}

double memory_bytes(const Model& m, const Layout& l, const Params& p, bool flash) {
  const double on_device = params_on_device(m, l, p);
  const double weights_grads = on_device * 2 * m.bytes_per_param;
  const double optimizer = on_device * 12;  // fp32 master weights, Adam's two moments
  double states = 0;
  switch (l.sharding) {
    case Sharding::none:
      states = weights_grads + optimizer;
      break;
    case Sharding::optimizer:
      states = weights_grads + optimizer / l.dp;
      break;
    case Sharding::full:
      states = (weights_grads + optimizer) / l.dp;
      break;
  }
  // 1F1B: the first stage holds pp micro-batches of its layers (all the
  // model's layers' worth); interleaving adds (pp - 1) / (pp * v) of that.
  const double in_flight = l.pp == 1 ? 1.0 : 1.0 + (l.pp - 1.0) / (l.pp * l.vpp);
  return states + activation_bytes(m, l, flash) * m.layers * in_flight;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(Code::invalid_argument, "planner: " + what);
}

}  // namespace

double model_flops_per_token(const Model& m) {
  const Params p = params_of(m);
  const double matmul = m.layers * (p.attention + m.top_k * p.ffn) + p.embedding / 2;
  return 6 * matmul + 12.0 * m.layers * m.hidden * m.seq;
}

void check(const Model& m, const Devices& d) {
  require(m.layers > 0 && m.hidden > 0 && m.ffn > 0 && m.vocab > 0 && m.seq > 0 && m.global_batch > 0,
          "model '" + m.name + "': layers, hidden, ffn, vocab, seq and global_batch must be positive");
  require(m.heads > 0 && m.hidden % m.heads == 0, "model '" + m.name + "': heads must divide hidden");
  require(m.kv_heads > 0 && m.heads % m.kv_heads == 0, "model '" + m.name + "': kv_heads must divide heads");
  require(m.experts >= 1 && m.top_k >= 1 && m.top_k <= m.experts,
          "model '" + m.name + "': top_k in [1, experts]");
  require(m.bytes_per_param > 0, "model '" + m.name + "': bytes_per_param must be positive");
  require(d.count > 0 && d.per_node > 0, "devices: count and per_node must be positive");
  require(d.peak_tflops > 0 && d.memory_gib > 0 && d.intra_gbps > 0 && d.inter_gbps > 0,
          "devices: peak_tflops, memory_gib, intra_gbps and inter_gbps must be positive");
}

Score evaluate(const Model& m, const Devices& d, const Layout& l, const Framework& f, const Efficiency& eff) {
  check(m, d);
  require(l.tp && l.pp && l.dp && l.ep && l.cp && l.vpp && l.micro_batch, "every layout degree must be >= 1");
  require(static_cast<uint64_t>(l.tp) * l.pp * l.dp * l.cp == d.count,
          describe(l) + " covers " + std::to_string(static_cast<uint64_t>(l.tp) * l.pp * l.dp * l.cp) +
              " devices, not " + std::to_string(d.count));
  const Params p = params_of(m);
  const double N = d.count, B = static_cast<double>(m.global_batch), s = m.seq, h = m.hidden, L = m.layers;
  const double t = l.tp, pp = l.pp, v = l.vpp, c = l.cp, e = l.ep;
  const double micro = std::ceil(B / l.dp / l.micro_batch);
  const double rate = (d.gemm_tflops > 0 ? d.gemm_tflops : 0.7 * d.peak_tflops) * 1e12;
  const double link = d.links_measured ? 1.0 : eff.link;
  const double intra = d.intra_gbps * 1e9 * link, inter = d.inter_gbps * 1e9 * link;
  const double lat_in = d.intra_latency_us > 0 ? d.intra_latency_us * 1e-6 : eff.latency_s;
  const double lat_out = d.inter_latency_us > 0 ? d.inter_latency_us * 1e-6 : eff.latency_s;

  Score sc;
  const double tokens = B * s, flops = model_flops_per_token(m) * tokens / N;
  const double layer_flops = 6 * L * (p.attention + m.top_k * p.ffn) * tokens / N;
  const double attn_flops = 12 * L * h * s * tokens / N;
  double extra = 0;
  if (l.recompute == Recompute::full) extra = (layer_flops + attn_flops) / 3;
  if (l.recompute == Recompute::selective) extra = attn_flops / 3;
  sc.compute_s = d.model_tflops > 0 ? (flops + extra) / (d.model_tflops * 1e12)
                                    : (flops + extra) / rate * (1 + eff.non_gemm);

  const double act = l.micro_batch * s * h * m.bytes_per_param / c;  // one micro-batch's hidden states
  if (l.tp > 1) {
    const double reduces = (4.0 + (l.recompute == Recompute::full ? 2 : 0)) / (m.parallel_block ? 2 : 1);
    const bool in = l.tp <= d.per_node;
    sc.tp_s =
        L / pp * micro * reduces * (2 * (t - 1) / t * act / (in ? intra : inter) + (in ? lat_in : lat_out));
  }
  if (l.cp > 1) {
    const bool in = l.tp * l.cp <= d.per_node;
    sc.cp_s =
        L / pp * micro * 3 *
        ((c - 1) / c * act * 2 * m.kv_heads / m.heads / t / (in ? intra : inter) + (in ? lat_in : lat_out));
  }
  if (l.ep > 1) {
    // Four exchanges of the tokens (to the experts and back, forward and
    // backward) and two small ones before them: the per-expert counts an
    // all-to-all(v) needs and the load statistics of the auxiliary loss.
    const bool in = l.ep <= d.per_node;
    const double lat = in ? lat_in : lat_out;
    sc.ep_s = L / pp * micro * (4 * ((e - 1) / e * act * m.top_k / (in ? intra : inter) + lat) + 2 * lat);
  }
  const double uneven = std::ceil(L / (pp * v)) * pp * v / L;
  const double per_micro = (sc.compute_s + sc.tp_s + sc.cp_s + sc.ep_s) / micro * uneven;
  const double work = per_micro * micro;
  if (l.pp > 1) {
    sc.bubble_s = (pp - 1) / v * per_micro;
    const bool out = static_cast<uint64_t>(l.tp) * l.cp * l.dp >= d.per_node;
    const double bw = out ? inter : intra, lat = out ? lat_out : lat_in;
    sc.pp_s = f.blocking_p2p ? micro * 4 * (act / bw + lat) : micro * v * 2 * (act / t / bw + lat);
  }
  // Gradients: reduce-scatter inside the node, all-reduce of the shards
  // between nodes, all-gather inside (one ring when dp is all inside).
  const double grads = params_on_device(m, l, p) * m.bytes_per_param;
  const double d_in = std::max(1.0, std::min<double>(l.dp, std::floor(d.per_node / (t * c))));
  const double n_out = std::ceil(l.dp / d_in);
  double dp_s = 2 * (d_in - 1) / d_in * grads / intra + 2 * (n_out - 1) / n_out * grads / d_in / inter +
                (d_in > 1 ? lat_in : 0) + (n_out > 1 ? lat_out : 0);
  if (l.sharding == Sharding::full) dp_s *= 1.5;  // parameters gathered again for backward
  sc.dp_s = dp_s * (1 - f.dp_overlap);
  // The breakdown is of the step: compute and the per-layer exchanges stretched by uneven stages.
  const double stretch = uneven;
  sc.compute_s *= stretch;
  sc.tp_s *= stretch;
  sc.cp_s *= stretch;
  sc.ep_s *= stretch;
  sc.step_s = work + sc.bubble_s + sc.pp_s + sc.dp_s;
  sc.mfu = model_flops_per_token(m) * tokens / (sc.step_s * N * d.peak_tflops * 1e12);
  sc.tokens_per_s = tokens / sc.step_s;
  const double bytes = memory_bytes(m, l, p, f.flash_attention);
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

std::string describe(const Layout& l) {
  return "tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp) + " dp" + std::to_string(l.dp) + " ep" +
         std::to_string(l.ep) + " cp" + std::to_string(l.cp) + " v" + std::to_string(l.vpp) + " mb" +
         std::to_string(l.micro_batch) + " recompute=" + recompute_name(l.recompute) +
         " shard=" + sharding_name(l.sharding);
}

}  // namespace sigma::planner
