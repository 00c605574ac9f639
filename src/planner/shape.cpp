// The model's shape: parameters, attention widths, activation bytes.
#include "shape.hpp"

namespace sigma::planner::detail {

namespace {

double head_dim(const Model& m) { return m.head_dim ? m.head_dim : double(m.hidden) / m.heads; }

double attention_params(const Model& m) {
  const double h = m.hidden, heads = m.heads;
  const auto& a = m.mla;
  if (a.kv_lora == 0) return 2 * h * heads * head_dim(m) + 2 * h * m.kv_heads * head_dim(m);
  const double qk = a.qk_nope + a.qk_rope;
  const double q = a.q_lora ? h * a.q_lora + a.q_lora * heads * qk : h * heads * qk;
  const double kv = h * (a.kv_lora + a.qk_rope) + a.kv_lora * heads * (a.qk_nope + a.v_head);
  return q + kv + heads * a.v_head * h;
}

// Elements per token a layer's attention keeps: the norm's input, the
// projections' input, queries, keys, values, the output (FlashAttention's
// statistics are per head, negligible), MLA's latents.
double attention_elements(const Model& m) {
  const double h = m.hidden, heads = m.heads;
  const auto& a = m.mla;
  if (a.kv_lora == 0) return 2 * h + 2 * heads * head_dim(m) + 2 * m.kv_heads * head_dim(m);
  const double qk = a.qk_nope + a.qk_rope;
  return 2 * h + a.q_lora + a.kv_lora + a.qk_rope + 2 * heads * qk + 2 * heads * a.v_head;
}

}  // namespace

Shape shape_of(const Model& m) {
  Shape s;
  const double h = m.hidden, mats = m.gated_ffn ? 3.0 : 2.0;
  const bool moe = m.experts > 1;
  const double eff = m.expert_ffn ? m.expert_ffn : m.ffn;
  const double sff = m.shared_ffn ? m.shared_ffn : eff;
  s.layers = m.layers + m.mtp_depth;
  const double dense_layers = moe ? m.dense_layers : s.layers;
  s.moe_layers = moe ? s.layers - dense_layers : 0;
  s.attention = attention_params(m);
  s.dense_ffn = mats * h * m.ffn;
  s.expert = mats * h * eff;
  s.shared = m.shared_experts * mats * h * sff;
  s.router = moe ? h * m.experts : 0;
  s.head = h * m.vocab;
  s.embedding = 2 * s.head;
  const double mtp_proj = m.mtp_depth * 2 * h * h;
  s.score_width = m.mla.kv_lora ? double(m.heads) * (m.mla.qk_nope + m.mla.qk_rope + m.mla.v_head)
                                : 2.0 * m.heads * head_dim(m);
  s.kv_width = m.mla.kv_lora ? double(m.heads) * (m.mla.qk_nope + m.mla.qk_rope + m.mla.v_head)
                             : 2.0 * m.kv_heads * head_dim(m);
  s.routed_active = s.moe_layers * m.top_k * s.expert;
  s.linear_active = s.layers * s.attention + dense_layers * s.dense_ffn + s.moe_layers * s.shared +
                    s.routed_active + mtp_proj;
  s.bf16_active = s.moe_layers * s.router + (1 + m.mtp_depth) * s.head;
  s.dense_params = s.layers * s.attention + dense_layers * s.dense_ffn +
                   s.moe_layers * (s.shared + s.router) + s.embedding + mtp_proj;
  s.expert_params = s.moe_layers * m.experts * s.expert;
  // A dense FFN keeps its norm's input, its own and its intermediates
  // (gated: gate, up and their product; else the activation's input and
  // output); a MoE layer keeps each routed copy's input, intermediates and
  // output (the combine's backward needs them) and the shared experts'.
  const double dense_mlp = 2 * h + mats * m.ffn;
  const double moe_mlp = 2 * h + m.top_k * (2 * h + mats * eff) + m.shared_experts * mats * sff;
  const double per_layer =
      s.layers * attention_elements(m) + dense_layers * dense_mlp + s.moe_layers * moe_mlp;
  s.activation_bytes = 2 * per_layer / s.layers;
  return s;
}

}  // namespace sigma::planner::detail
