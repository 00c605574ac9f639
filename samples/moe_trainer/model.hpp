// A small decoder-only transformer with MoE feed-forward layers, written for
// expert parallelism over libsigma: every parameter lives in one of two flat
// f32 buffers (so the session snapshots, the guardrails scan and the
// optimizer update each see a handful of contiguous ranges), and the MoE
// layers send their tokens to the ranks holding their experts through
// sigma::parallel::Dispatcher, with autograd running the reverse exchange.
//
// dense: embedding (tied with the output), positions, attention, norms and
// routers -- the same on every data-parallel rank, gradients all-reduced.
// experts: the experts this rank holds, in `slots` places per layer (twice
// its even share, so the autotuner can move experts here while the
// snapshot keeps one size); slot_of says which expert is in which slot.
#pragma once

#include <sigma/parallel.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe {

struct ModelConfig {
  int64_t layers = 4, d_model = 128, heads = 4, ffn = 256, experts = 8, top_k = 2;
  int64_t seq = 64, vocab = 256;  // bytes
  double capacity_factor = 1.25;  // per expert and rank; 0 = dropless
  double aux_weight = 0.01;       // the Switch load-balancing loss's weight
  // GEMMs in f16 (see Model::gemm): attention, the experts and the output
  // head; norms, softmax, the router and the loss stay in f32, as mixed
  // precision keeps them.
  bool f16 = false;
};

// A contiguous range of a flat buffer that the guardrails track as one layer.
struct Segment {
  std::string name;
  int64_t offset = 0, count = 0;
};

// What the MoE layers saw in one forward pass (this rank's tokens).
struct MoeStats {
  uint64_t tokens = 0, routed = 0, dropped = 0;
  double aux = 0;  // mean over layers of the group's aux loss (1 = balanced)
};

class Model {
 public:
  // Initialises every parameter from `seed` alone, experts by their global
  // index: any expert-group size starts from the same model.
  Model(const ModelConfig& config, uint32_t ep_rank, uint32_t ep_size, int64_t slots, uint64_t seed);

  // The local mean cross-entropy of `batch` ([B, seq + 1] bytes as int64)
  // plus the aux loss, for backward. Collective over the dispatcher's group
  // (the MoE exchanges, forward now and backward later, in the same order
  // on every rank).
  torch::Tensor loss(const torch::Tensor& batch, sigma::parallel::Dispatcher& dispatcher, MoeStats* stats,
                     torch::Tensor* cross_entropy);

  // Puts this rank's default block of experts in its first slots at their
  // initial values, the other slots zero (a worker that learns its rank
  // only when it joins a fresh start).
  void init_experts(uint32_t ep_rank, uint32_t ep_size, uint64_t seed);

  // Where expert e's parameters of `layer` are in the flat buffers (w1 then
  // w2), for moving it; slot_of[e] is its slot here, -1 when elsewhere.
  int64_t slot_offset(int64_t layer, int64_t slot) const { return (layer * slots_ + slot) * slot_numel(); }
  int64_t slot_numel() const { return 2 * c_.ffn * c_.d_model; }
  int64_t slots() const { return slots_; }
  std::vector<int32_t> slot_of;
  // Seconds spent inside the MoE exchanges since the last call.
  double take_exchange_seconds();

  // The parts whose GEMMs run in f16 when config().f16, by the name the
  // guardrails know them by: "embed" (the tied output head),
  // "blockL.attn", "blockL.experts". set_f32(i, true) runs part i in f32
  // (escalated) from the next forward pass on.
  const std::vector<std::string>& precision_parts() const { return parts_; }
  void set_f32(size_t part, bool f32) { f32_.at(part) = f32; }
  // Per part, the largest |value| its GEMMs computed (before rounding to
  // f16; +inf for one not finite) since the last call. Zeros in f32 mode.
  std::vector<double> take_activation_amax();
  // Multiplies layer `layer`'s attention logits by `gain` (1: off): the
  // growth of the logits that destabilises large runs, made to happen here.
  void set_logit_gain(int64_t layer, double gain) { gain_layer_ = layer, gain_ = gain; }

  const ModelConfig& config() const { return c_; }
  torch::Tensor dense, dense_grad;    // flat f32, replicated
  torch::Tensor expert, expert_grad;  // flat f32, this rank's experts
  std::vector<Segment> dense_layers;  // for the guardrails

  struct Exchange;  // one MoE layer's plan, alive until its backward is done

 private:
  torch::Tensor param(torch::Tensor& flat, torch::Tensor& grad, int64_t& at, std::vector<int64_t> shape);
  torch::Tensor moe_layer(const torch::Tensor& h, int64_t layer, sigma::parallel::Dispatcher& d,
                          MoeStats* stats);
  torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b, size_t part, double divisor = 1,
                     double gain = 1);

  ModelConfig c_;
  int64_t local_ = 0, slots_ = 0;
  double exchange_s_ = 0;
  struct Block {
    torch::Tensor ln1_w, ln1_b, qkv, proj, ln2_w, ln2_b, router;
    std::vector<torch::Tensor> w1, w2;  // per slot: [ffn, d], [d, ffn]
  };
  torch::Tensor embed_, pos_, lnf_w_, lnf_b_;
  std::vector<Block> blocks_;
  std::vector<std::shared_ptr<Exchange>> inflight_;
  std::vector<torch::Tensor> aux_terms_;  // one per MoE layer, this pass
  std::vector<std::string> parts_;        // precision parts: embed, then per block attn, experts
  std::vector<bool> f32_;                 // escalated parts
  std::vector<double> amax_;              // per part, since take_activation_amax()
  int64_t gain_layer_ = -1;
  double gain_ = 1;
};

}  // namespace moe
