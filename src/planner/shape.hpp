// What a model is, counted once: its matmul parameters (stored and passed
// per token), its attention's widths and what one layer keeps for backward.
// The cost model, the memory model and the FLOP count all read it.
#pragma once

#include <sigma/planner.hpp>

namespace sigma::planner::detail {

struct Shape {
  double layers = 0;         // transformer layers, multi-token prediction modules' included
  double moe_layers = 0;     // of them, those with experts
  double attention = 0;      // matmul parameters of one layer's attention
  double dense_ffn = 0;      // of a dense layer's FFN
  double expert = 0;         // of one routed expert
  double shared = 0;         // of a MoE layer's shared experts, all of them
  double router = 0;         // of a MoE layer's router
  double embedding = 0;      // the input embedding and the output head (untied)
  double head = 0;           // the output head alone
  double score_width = 0;    // per layer, query/key plus value widths summed over heads (2 x hidden for MHA)
  double kv_width = 0;       // per token: the keys' and values' widths (what context parallelism gathers)
  double linear_active = 0;  // per token: parameters of the linear layers it passes (FP8-able)
  double bf16_active = 0;    // per token: router and output heads (kept in bf16)
  double routed_active = 0;  // per token: of linear_active, the routed experts'
  double dense_params = 0;   // stored parameters every expert-parallel rank holds
  double expert_params = 0;  // routed experts' parameters, split over expert parallelism
  // Activation bytes per token one layer keeps for backward, the model's
  // layers averaged, without attention scores.
  double activation_bytes = 0;
};

Shape shape_of(const Model& m);

}  // namespace sigma::planner::detail
