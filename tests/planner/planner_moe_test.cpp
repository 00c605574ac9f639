// The planner's model of today's MoE: shared and fine-grained experts,
// leading dense layers, MLA, node-limited routing, FP8 GEMMs, DualPipe,
// parallel folding, and the memory model's schedules.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace sigma::planner {
namespace {

// A DeepSeek-V3-shaped model, scaled down: MLA, 1 shared + 32 routed
// experts of width 256, top-4, the first 2 layers dense.
Model small_v3() {
  Model m;
  m.name = "small-v3";
  m.layers = 8;
  m.hidden = 1024;
  m.ffn = 4096;
  m.heads = 16;
  m.kv_heads = 16;
  m.vocab = 32000;
  m.experts = 32;
  m.top_k = 4;
  m.expert_ffn = 256;
  m.shared_experts = 1;
  m.dense_layers = 2;
  m.seq = 2048;
  m.global_batch = 256;
  m.gated_ffn = true;
  m.mla = {384, 128, 64, 32, 64};
  return m;
}

Devices devices(uint32_t count) {
  Devices d;
  d.count = count;
  d.per_node = 8;
  d.memory_gib = 80;
  d.peak_tflops = 989;
  d.gemm_tflops = 600;
  d.intra_gbps = 160;
  d.inter_gbps = 50;
  return d;
}

TEST(PlannerMoe, FlopsCountSharedRoutedDenseAndMlaParts) {
  const Model m = small_v3();
  const double h = 1024, heads = 16, qk = 64 + 32;
  const double attention = h * 384 + 384 * heads * qk                  // queries through their latent
                           + h * (128 + 32) + 128 * heads * (64 + 64)  // keys and values through theirs
                           + heads * 64 * h;                           // output
  const double expert = 3 * h * 256, dense = 3 * h * 4096, router = h * 32, head = h * 32000;
  const double linear = 8 * attention + 2 * dense + 6 * (4 + 1) * expert + 6 * router + head;
  const double scores = 8.0 * 2048 * heads * (qk + 64);
  EXPECT_NEAR(model_flops_per_token(m), 6 * linear + 6 * scores, 1);
  Model mtp = m;
  mtp.mtp_depth = 1;  // one more MoE layer, its 2h x h projection and the head again
  EXPECT_NEAR(model_flops_per_token(mtp) - model_flops_per_token(m),
              6 * (attention + 5 * expert + router + 2 * h * h + head) + 6 * 2048 * heads * (qk + 64), 1);
}

TEST(PlannerMoe, AHeadWidthApartFromHiddenCountsItsOwnProjections) {
  Model m = small_v3();
  m.mla = {};
  m.kv_heads = 4;
  const double base = model_flops_per_token(m);
  m.head_dim = 128;  // 16 heads x 128 = 2048 wide queries on a 1024 model (Qwen3's shape)
  const double h = 1024;
  EXPECT_NEAR(model_flops_per_token(m) - base,
              6 * 8 * (2 * h * 1024 + 2 * h * 256)  // q and o, k and v: twice as wide
                  + 6 * 8.0 * 2048 * (2 * 2048 - 2 * 1024),
              1);
}

// Node-limited routing: with experts on 4 nodes, top-4 sends a token's
// copies to up to 4 nodes; limited to 1 node, one copy crosses.
TEST(PlannerMoe, NodeLimitedRoutingSendsFewerCopiesAcrossNodes) {
  Model m = small_v3();
  const Devices d = devices(32);
  const Layout l{1, 1, 32, 32, 1, 1, 1, Recompute::none, Sharding::optimizer};
  const Score open = evaluate(m, d, l);
  m.max_nodes = 1;
  const Score limited = evaluate(m, d, l);
  EXPECT_LT(limited.ep_s, open.ep_s * 0.6);
  Framework node_dispatch;
  node_dispatch.node_dispatch = true;  // once per node, no limit: between the two
  m.max_nodes = 0;
  const Score once = evaluate(m, d, l, node_dispatch);
  EXPECT_LT(once.ep_s, open.ep_s);
  EXPECT_GT(once.ep_s, limited.ep_s);
}

TEST(PlannerMoe, Fp8RunsTheLinearLayersAtTheFp8Rate) {
  Model m = small_v3();
  const Devices d = devices(8);
  const Layout l{1, 1, 8, 8, 1, 1, 1, Recompute::none, Sharding::optimizer};
  const Score bf16 = evaluate(m, d, l);
  m.fp8 = true;
  const Score fp8 = evaluate(m, d, l);
  EXPECT_LT(fp8.compute_s, bf16.compute_s * 0.85);
  EXPECT_GT(fp8.compute_s, bf16.compute_s * 0.5);  // attention, router and head stay bf16
}

TEST(PlannerMoe, NarrowExpertsAndPartTilesCostGemmTime) {
  const Model m = small_v3();
  const Devices d = devices(8);
  const Layout l{1, 1, 8, 8, 1, 1, 1, Recompute::none, Sharding::optimizer};
  Efficiency eff;
  eff.expert_width = 0;  // every expert at the GEMM rate
  const Score wide = evaluate(m, d, l, {}, eff);
  eff.expert_width = 256;  // experts 256 wide run at half the rate
  EXPECT_GT(evaluate(m, d, l, {}, eff).compute_s, wide.compute_s);
  eff.expert_width = 0;
  eff.gemm_tile = 8 * 2048 * 4 / 32 * 3 / 2;  // 1.5 x the tokens an expert gets: a third of the tile idle
  EXPECT_GT(evaluate(m, d, l, {}, eff).compute_s, wide.compute_s);
}

TEST(PlannerMoe, DualPipeHidesTheAllToAllsShrinksTheBubbleAndKeepsTwoWeightCopies) {
  const Model m = small_v3();
  const Devices d = devices(64);
  const Layout l{1, 8, 8, 8, 1, 1, 1, Recompute::none, Sharding::optimizer};
  Framework one_f_one_b;
  one_f_one_b.uneven_stages = true;
  Framework dualpipe = one_f_one_b;
  dualpipe.schedule = Schedule::dualpipe;
  const Score a = evaluate(m, d, l, one_f_one_b), b = evaluate(m, d, l, dualpipe);
  EXPECT_GT(a.ep_s, 0);
  EXPECT_LT(b.ep_s, a.ep_s);
  const double per_micro = [&](const Score& s) { return s.bubble_s; }(a) / 7;  // 1F1B: pp - 1
  EXPECT_NEAR(b.bubble_s / (per_micro * (b.compute_s + b.tp_s + b.ep_s) / (a.compute_s + a.tp_s + a.ep_s)),
              (8.0 / 2 - 1) * 2 / 3, 1e-6);
  EXPECT_GT(b.memory_gib, a.memory_gib);
  Framework zero_bubble = one_f_one_b;
  zero_bubble.schedule = Schedule::zero_bubble;
  EXPECT_NEAR(evaluate(m, d, l, zero_bubble).bubble_s, a.bubble_s / 3, 1e-12);
}

TEST(PlannerMoe, FoldingLetsExpertParallelismSpanTensorParallelRanks) {
  Model m = small_v3();
  const Devices d = devices(16);
  Space space;
  space.tp = {2};
  space.pp = {1};
  space.ep = {16};
  EXPECT_TRUE(search(m, d, space).empty());  // ep 16 over 8 data-parallel ranks
  Framework folded;
  folded.moe_folding = true;
  const auto got = search(m, d, space, folded);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].layout.dp, 8u);
  EXPECT_EQ(got[0].layout.ep, 16u);
}

TEST(PlannerMoe, UnequalStagesGiveTheFirstStageFewerLayersToHold) {
  Model m = small_v3();
  m.layers = 9;  // on 4 stages: 2, 2, 2, 3 -- the first holds 2 of the 4 micro-batches' worth
  const Devices d = devices(32);
  const Layout l{1, 4, 8, 8, 1, 1, 1, Recompute::none, Sharding::optimizer};
  Framework f;
  f.uneven_stages = true;
  Model even = m;
  even.layers = 12;  // 3 per stage
  const double act9 = evaluate(m, d, l, f).memory_gib, act12 = evaluate(even, d, l, f).memory_gib;
  EXPECT_LT(act9, act12);
}

TEST(PlannerMoe, LayoutsThatFitComeFirstWhenOthersAreKept) {
  const Model m = small_v3();
  Devices d = devices(8);
  d.memory_gib = 1;
  Space space;
  space.require_fit = false;
  const auto got = search(m, d, space, {}, {}, 1000);
  ASSERT_FALSE(got.empty());
  bool seen_unfit = false;
  for (const auto& c : got) {
    if (!c.score.fits) seen_unfit = true;
    EXPECT_FALSE(seen_unfit && c.score.fits) << describe(c.layout) << " fits after one that does not";
  }
  EXPECT_TRUE(got.front().score.fits);
  EXPECT_TRUE(seen_unfit);
}

TEST(PlannerMoe, SparesAreHeldOutAndWholeNodesMoreWhereTheRestDividesBetter) {
  const Model m = small_v3();
  Devices d = devices(64);
  d.spares = 3;
  EXPECT_THROW(evaluate(m, d, Layout{1, 1, 61, 1}), Error);  // evaluate prices what a layout covers
  const auto got = search(m, d, Space{}, {}, {}, 20);
  ASSERT_FALSE(got.empty());
  for (const auto& c : got) {
    // 61, or whole nodes: 56, 48
    EXPECT_TRUE(c.devices == 61 || c.devices == 56 || c.devices == 48)
        << c.devices << " " << describe(c.layout);
    EXPECT_EQ(static_cast<uint64_t>(c.layout.tp) * c.layout.pp * c.layout.dp * c.layout.cp, c.devices);
    if (c.layout.ep > 1) {
      EXPECT_GE(c.max_experts_per_rank, m.experts / c.layout.ep);
    }
  }
}

TEST(PlannerMoe, ExpertHeadroomKeepsRoomForTheAutotunerToMoveExpertsIn) {
  const Model m = small_v3();
  Devices d = devices(64);
  d.memory_gib = 6;
  Space space;
  space.ep = {8};
  const auto tight = search(m, d, space, {}, {}, 1);
  ASSERT_FALSE(tight.empty());
  space.expert_headroom = 4;  // each rank's 4 and 4 more
  const auto roomy = search(m, d, space, {}, {}, 50);
  ASSERT_FALSE(roomy.empty());
  for (const auto& c : roomy) EXPECT_GE(c.max_experts_per_rank, 8u) << describe(c.layout);
  EXPECT_GE(roomy.front().score.step_s, tight.front().score.step_s);
  space.expert_headroom = 1000;
  EXPECT_TRUE(search(m, d, space).empty());
}

TEST(PlannerMoe, ANoisyLinkMakesASynchronousExchangeWaitForItsSlowestRank) {
  const Model m = small_v3();
  Devices d = devices(64);
  const Layout l{1, 1, 64, 1, 1, 1, 1, Recompute::none, Sharding::optimizer};
  const Score quiet = evaluate(m, d, l);
  d.inter_noise = 0.5;
  const Score noisy = evaluate(m, d, l);
  EXPECT_NEAR(noisy.dp_s / quiet.dp_s, 1 + 0.5 * std::sqrt(2 * std::log(64.0)), 1e-9);
  EXPECT_DOUBLE_EQ(noisy.compute_s, quiet.compute_s);
}

std::string refusal(const std::string& yaml) {
  try {
    parse_request(yaml, "moe.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(PlannerMoe, ARequestCarriesTheMoeShapeAndTheFramework) {
  const std::string model =
      "model: {layers: 61, hidden: 7168, ffn: 18432, heads: 128, vocab: 129280, seq: 4096,\n"
      "        global_batch: 15360, experts: 256, top_k: 8, expert_ffn: 2048, shared_experts: 1,\n"
      "        dense_layers: 3, max_nodes: 4, mtp_depth: 1, fp8: true, gated_ffn: true,\n"
      "        mla: {q_lora: 1536, kv_lora: 512, qk_nope: 128, qk_rope: 64, v_head: 128}}\n";
  const std::string devs = "devices: {count: 2048, peak_tflops: 989, intra_gbps: 160, inter_gbps: 50}\n";
  const Request q = parse_request(model + devs +
                                      "framework: {schedule: dualpipe, comm_sm_share: 0.15, adam_bytes: 8,\n"
                                      "            uneven_stages: true}\n"
                                      "search: {tp: 1, pp: 16, ep: 64}\n",
                                  "moe.yaml");
  EXPECT_EQ(q.model.mla.kv_lora, 512u);
  EXPECT_EQ(q.model.dense_layers, 3u);
  EXPECT_TRUE(q.model.fp8);
  EXPECT_EQ(q.framework.schedule, Schedule::dualpipe);
  const auto got = search(q.model, q.devices, q.space, q.framework, q.efficiency, 1);
  ASSERT_EQ(got.size(), 1u);  // DeepSeek-V3's published layout fits
  EXPECT_EQ(got[0].layout.dp, 128u);

  const std::string schedule = refusal(model + devs + "framework: {schedule: gpipe}\n");
  EXPECT_NE(schedule.find("moe.yaml:6"), std::string::npos) << schedule;
  EXPECT_NE(schedule.find("'gpipe' is not one of 1f1b, zero_bubble, dualpipe"), std::string::npos)
      << schedule;
  const std::string mla = refusal(
      "model: {layers: 4, hidden: 256, ffn: 1024, heads: 8, vocab: 256, seq: 128, global_batch: 8,\n"
      "        mla: {kv_lora: 64, qk_nope: 32, qk_rope: 16}}\n" +
      devs);
  EXPECT_NE(mla.find("model.mla.v_head"), std::string::npos) << mla;
  const std::string dense = refusal(
      "model: {layers: 4, hidden: 256, ffn: 1024, heads: 8, vocab: 256, seq: 128, global_batch: 8,\n"
      "        dense_layers: 5}\n" +
      devs);
  EXPECT_NE(dense.find("model.dense_layers"), std::string::npos) << dense;
}

}  // namespace
}  // namespace sigma::planner
