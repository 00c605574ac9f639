// The memory model: what one device holds for a layout (weights, gradients,
// optimizer states as sharded, and the activations the schedule keeps).
#include "memory.hpp"

#include <algorithm>
#include <cmath>

namespace sigma::planner::detail {

Held held_params(const Shape& s, const Layout& l, const Framework& f) {
  Held h;
  h.dense = s.dense_params / (static_cast<double>(l.tp) * l.pp);
  h.expert = s.expert_params / ((f.moe_folding ? 1.0 : l.tp) * l.pp * l.ep);
  const double stage_ranks = static_cast<double>(l.dp) * (f.moe_folding ? l.tp * l.cp : 1);
  h.expert_dp = std::max(1.0, stage_ranks / l.ep);
  return h;
}

double stage_layers(const Shape& s, const Layout& l, const Framework& f) {
  if (l.pp == 1) return s.layers;
  // Uneven stages give the first stage, which keeps the most in flight, the
  // fewer layers (Llama 3: 7 of 126 on 16 stages).
  return f.uneven_stages ? std::max(1.0, std::floor(s.layers / l.pp)) : std::ceil(s.layers / l.pp);
}

double micro_batches_in_flight(const Layout& l, const Framework& f) {
  const double pp = l.pp;
  if (l.pp == 1) return 1;
  if (f.schedule == Schedule::dualpipe) return pp + 1;
  // 1F1B: pp micro-batches on the first stage; interleaving adds
  // (pp - 1) / (pp * v) of that (Korthikanti et al.).
  return l.vpp == 1 ? pp : pp * (1 + (pp - 1) / (pp * l.vpp));
}

double layer_activation_bytes(const Model& m, const Shape& s, const Layout& l, bool flash) {
  const double tokens = static_cast<double>(m.seq) * l.micro_batch / l.cp;
  if (l.recompute == Recompute::full) return tokens * 2.0 * m.hidden / l.tp;
  // Without FlashAttention the softmax scores and their dropout mask stay
  // (Korthikanti et al.'s 5as^2b); selective recompute drops them.
  const double scores = !flash && l.recompute == Recompute::none ? 5.0 * m.heads * m.seq / l.cp : 0;
  return tokens * (s.activation_bytes + scores) / l.tp;
}

double memory_bytes(const Model& m, const Shape& s, const Layout& l, const Framework& f) {
  const Held p = held_params(s, l, f);
  const double on_device = p.dense + p.expert;
  const double weights = m.bytes_per_param, grads = m.bytes_per_param;
  const double sharded = p.dense / l.dp + p.expert / p.expert_dp;
  double states = 0;
  switch (l.sharding) {
    case Sharding::none:
      states = on_device * (weights + grads + f.adam_bytes);
      break;
    case Sharding::optimizer:
      states = on_device * (weights + grads) + sharded * f.adam_bytes;
      break;
    case Sharding::full:
      states = sharded * (weights + grads + f.adam_bytes);
      if (!f.reshard_after_forward) states += on_device * weights;  // gathered until backward
      break;
  }
  if (f.schedule == Schedule::dualpipe) states += on_device * weights;  // its second copy of the weights
  const double activations = layer_activation_bytes(m, s, l, f.flash_attention) * stage_layers(s, l, f) *
                             micro_batches_in_flight(l, f);
  return states + activations;
}

uint32_t experts_within_memory(const Model& m, const Shape& s, const Layout& l, const Framework& f,
                               double free_bytes) {
  if (m.experts <= 1 || l.ep <= 1 || s.moe_layers == 0) return 0;
  // One more expert on a rank: its weights, gradients and optimizer state
  // (a moved expert's state moves with it) in each of the stage's MoE layers.
  const double layers = std::ceil(s.moe_layers / l.pp);
  const double copies = f.schedule == Schedule::dualpipe ? 2 : 1;  // DualPipe's second copy of the weights
  const double per_expert =
      layers * s.expert / (f.moe_folding ? 1.0 : l.tp) * ((1 + copies) * m.bytes_per_param + f.adam_bytes);
  const double own = std::ceil(static_cast<double>(m.experts) / l.ep);
  const double more = std::floor(std::max(0.0, free_bytes) / per_expert);
  return static_cast<uint32_t>(std::min<double>(m.experts, own + more));
}

}  // namespace sigma::planner::detail
